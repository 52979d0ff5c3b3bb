"""The layout docs/architecture.md draws, kept true: who may import whom, no cycle, small modules.

Read with stdlib `ast` from the source files, so a violation is named by file and line whatever is
installed: an import cycle between modules, a package importing one it may not (the pure core imports
nothing of I/O), a module the sandbox runs that imports more than the standard library, a module past
the size a reader takes in, and an error class outside the one root.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

SRC = REPO / "src"
PACKAGE = SRC / "eval_runner"
#: Lines past which a module is asking to be split.
MAX_LINES = 620

#: Which of our areas each area may import (an area is a top-level package, or engine's and service's
#: sub-packages). Anything not listed imports only itself.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "nostr": set(),
    "contracts": {"nostr"},
    "engine.testset": {"errors", "contracts", "engine.grade"},
    "engine.grade": {"errors", "contracts", "nostr", "engine.testset", "engine.run", "engine.verdict"},
    "engine.run": {"errors", "contracts", "engine.testset"},
    "engine.agents": {"errors", "contracts", "engine.testset", "engine.run"},
    "engine.verdict": {"errors", "contracts"},
    "engine.report": {"errors", "contracts", "engine.testset", "engine.run", "engine.grade", "engine.verdict"},
    "engine": {"errors", "contracts", "nostr", "engine.testset", "engine.run", "engine.grade", "engine.verdict"}
    | {"engine.report", "stand_ins"},
    "service.ledger": {"errors", "contracts", "nostr"},
    "service.relay": {"errors", "contracts", "nostr"},
    "service.blobs": {"errors", "contracts", "nostr"},
    "service.releases": {"errors", "contracts", "nostr", "engine.testset", "service.blobs", "service.relay"},
    "service.requests": {"errors", "contracts", "nostr", "engine", "service", "service.ledger", "service.relay"}
    | {"service.blobs", "service.releases"}
    | {"engine.testset", "engine.run", "engine.grade", "engine.verdict", "engine.report", "stand_ins"}
    | {"engine.agents"},
    "service": {"errors", "contracts", "nostr", "engine.run", "engine.testset", "service.ledger", "service.relay"}
    | {"service.requests", "service.blobs", "service.releases", "engine.agents"},
    "trainer": {"errors", "contracts", "nostr", "engine.testset", "engine.verdict", "engine.report", "service.relay"},
    "reader": {"errors", "contracts", "nostr", "service.relay", "service.blobs", "service.releases"},
    "stand_ins": set(),
}
#: The pure core: no I/O of any kind.
PURE = ("errors", "nostr", "contracts")
IO_MODULES = {"asyncio", "socket", "subprocess", "sqlite3", "os", "shutil", "tempfile", "pathlib", "io"} | {
    "aiohttp",
    "websockets",
    "nostr_sdk",
}
#: Run inside the sandbox as `python3 -I -S`: the standard library only.
SANDBOXED = ("eval_runner.stand_ins.agent", "eval_runner.engine.run.bridge", "eval_runner.engine.agents.builtin_agent")
ERROR_ROOTS = {"EvalRunnerError", "ContractError", "NostrError"}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in a module, relative ones resolved, `from a import b` also as `a.b`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def ours(found: str) -> str | None:
    """The module of ours an import names (`a.b.Name` → `a.b`), or None for another package's."""
    candidate = found
    while candidate:
        if candidate in MODULES:
            return candidate
        candidate = candidate.rpartition(".")[0]
    return None


def area(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "root"
    if parts[0] in ("engine", "service") and len(parts) > 2:
        return f"{parts[0]}.{parts[1]}"
    if parts[0] in ("engine", "service") and len(parts) == 2 and f"eval_runner.{parts[0]}.{parts[1]}" in MODULES:
        inner = MODULES[f"eval_runner.{parts[0]}.{parts[1]}"]
        return f"{parts[0]}.{parts[1]}" if inner.name == "__init__.py" else parts[0]
    return parts[0]


def graph() -> dict[str, set[str]]:
    return {
        name: {target for _, found in imports(name, path) if (target := ours(found)) and target != name}
        for name, path in MODULES.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_each_package_imports_only_what_it_may() -> None:
    wrong = []
    for name, path in MODULES.items():
        mine = area(name)
        if mine not in MAY_IMPORT:
            continue  # the commands, the demo and the local eval may use anything
        for line, found in imports(name, path):
            target = ours(found)
            if target is None or target == "eval_runner":  # the root holds the version only
                continue
            theirs = area(target)
            if theirs != mine and theirs not in MAY_IMPORT[mine]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {mine} imports {target}")
    assert wrong == []


def test_the_pure_core_does_no_io() -> None:
    wrong = [
        f"{path.relative_to(REPO)}:{line}: imports {found}"
        for name, path in MODULES.items()
        if area(name) in PURE
        for line, found in imports(name, path)
        if found.split(".")[0] in IO_MODULES
    ]
    assert wrong == []


@pytest.mark.parametrize("name", SANDBOXED)
def test_what_runs_in_the_sandbox_needs_only_the_standard_library(name: str) -> None:
    path = MODULES[name]
    outside = [
        f"{path.relative_to(REPO)}:{line}: imports {found}"
        for line, found in imports(name, path)
        if found.split(".")[0] not in sys.stdlib_module_names and found != "__future__"
    ]
    assert outside == []


def test_no_module_is_past_the_size_a_reader_takes_in() -> None:
    long = {
        str(path.relative_to(REPO)): count
        for path in MODULES.values()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_error_of_ours_has_one_of_the_roots() -> None:
    """An error class derives from EvalRunnerError (or is a wire error, or derives from one that does)."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for name, path in MODULES.items():
        if name in SANDBOXED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                bases = [base.id if isinstance(base, ast.Name) else ast.unparse(base) for base in node.bases]
                classes[node.name] = (f"{path.relative_to(REPO)}:{node.lineno}", bases)

    def rooted(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in ERROR_ROOTS:
            return True
        if name not in classes or name in seen:
            return False
        return any(rooted(base, seen | {name}) for base in classes[name][1])

    loose = [f"{where}: {name}({', '.join(bases)})" for name, (where, bases) in classes.items() if not rooted(name)]
    loose = [line for line in loose if not line.split(": ")[1].startswith(tuple(ERROR_ROOTS))]
    assert loose == []
