"""No module under tests/ imports a test module or a conftest.py: what several test modules share lives in
`tests/support/` (or is a conftest fixture, which pytest hands out by name).

Importing a test module ties its tests to another file's and runs its module-level code in a second place;
pytest loads each conftest.py itself, so importing one by name makes a second copy of its fixtures.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO, TESTS, VECTORS


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names of the modules an import may load. `from a import b` may load `a.b`, so both count."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]


def forbidden(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return name.split(".", 1)[0] == "tests" and (last.startswith("test_") or last == "conftest")


def offences(source: str, path: Path) -> list[str]:
    """`file:line: statement` for each import of a test module or a conftest in one file."""
    module = module_of(path)
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        bad = sorted({name for name in targets(node, module, path.name == "__init__.py") if forbidden(name)})
        if bad:
            statement = ast.get_source_segment(source, node) or ast.unparse(node)
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: `{statement}` imports {', '.join(bad)}")
    return found


def python_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if VECTORS not in path.parents)


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    files = python_files()
    assert Path(__file__).resolve() in files
    assert len(files) > 50, "the walk missed the tests"
    found = [line for path in files for line in offences(path.read_text(encoding="utf-8"), path)]
    assert not found, "move what is shared to tests/support/ (or a conftest fixture):\n" + "\n".join(found)


AT = TESTS / "engine" / "report" / "test_html.py"


@pytest.mark.parametrize(
    ("source", "imported"),
    [
        ("from tests.engine.report.test_build import inputs", "tests.engine.report.test_build"),
        ("import tests.engine.report.test_build", "tests.engine.report.test_build"),
        ("import tests.engine.report.test_build as build", "tests.engine.report.test_build"),
        ("from tests.engine.report import test_build", "tests.engine.report.test_build"),
        ("from .test_build import inputs", "tests.engine.report.test_build"),
        ("from . import test_build", "tests.engine.report.test_build"),
        ("from ..run.test_sandbox import spec", "tests.engine.run.test_sandbox"),
        ("from tests.nostr.conftest import alice", "tests.nostr.conftest"),
        ("from tests.nostr import conftest", "tests.nostr.conftest"),
        ("import tests.conftest", "tests.conftest"),
        ("from .conftest import evals", "tests.engine.report.conftest"),
        ("def f() -> None:\n    from tests.engine.report.test_build import inputs\n", "tests.engine.report.test_build"),
    ],
)
def test_each_form_of_the_import_is_named(source: str, imported: str) -> None:
    [found] = offences(source, AT)
    assert found.startswith("tests/engine/report/test_html.py:")
    assert found.endswith(f"imports {imported}")


@pytest.mark.parametrize(
    "source",
    [
        "from tests.support.report_inputs import inputs",
        "from tests.support import report_inputs",
        "import tests.support.paths",
        "from eval_runner.engine.report import build",
        "import pytest",
        "from .support_only import thing",
    ],
)
def test_support_and_library_imports_pass(source: str) -> None:
    assert offences(source, AT) == []
