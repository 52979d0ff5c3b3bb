"""The vendored reference fixtures (tests/vectors/reference/, Apache-2.0), found by relative path."""

from __future__ import annotations

from eval_runner.contracts.strict_json import JsonValue, read
from tests.support.paths import TESTS

ROOT = TESTS / "vectors" / "reference"


def names(folder: str) -> list[str]:
    """File stems under `folder` (e.g. `eval-ext/ext-eval/valid`), sorted."""
    return sorted(path.stem for path in (ROOT / folder).glob("*.json"))


def raw(relative: str) -> bytes:
    return (ROOT / relative).read_bytes()


def load(relative: str) -> JsonValue:
    return read(raw(relative))
