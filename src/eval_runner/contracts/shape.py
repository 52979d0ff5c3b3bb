"""Field readers for closed JSON objects: each takes a value and its path and returns it narrowed.

Every contract parser is built from these, so every refusal names its field the same way
(`input.runs`, `cases[2].id`) and nothing but `ContractError` ever leaves a parser.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, is_digest

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def at(path: str, key: str | int) -> str:
    """The path of a member: `at("input", "runs") == "input.runs"`, `at("cases", 2) == "cases[2]"`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def fail(path: str, message: str, code: Code = Code.MALFORMED) -> ContractError:
    return ContractError(code, path, message)


def obj(value: JsonValue, path: str) -> dict[str, JsonValue]:
    if not isinstance(value, dict):
        raise fail(path, "must be an object")
    return value


def closed(
    value: JsonValue,
    path: str,
    required: Iterable[str],
    optional: Iterable[str] = (),
    *,
    unknown: Code = Code.MALFORMED,
) -> dict[str, JsonValue]:
    """An object with exactly the required keys, some of the optional ones, and nothing else."""
    found = obj(value, path)
    required = tuple(required)
    allowed = set(required) | set(optional)
    for key in found:
        if key not in allowed:
            raise fail(at(path, key), "is not a known field", unknown)
    for key in required:
        if key not in found:
            raise fail(at(path, key), "is required")
    return found


def string(
    value: JsonValue,
    path: str,
    *,
    min_bytes: int = 0,
    max_bytes: int | None = None,
    pattern: re.Pattern[str] | None = None,
    what: str = "a string",
) -> str:
    if not isinstance(value, str):
        raise fail(path, f"must be {what}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size < min_bytes:
        raise fail(path, "must not be empty" if min_bytes == 1 else f"must be at least {min_bytes} bytes")
    if max_bytes is not None and size > max_bytes:
        raise fail(path, f"is {size} bytes; at most {max_bytes}", Code.LIMIT_EXCEEDED)
    if pattern is not None and pattern.fullmatch(value) is None:
        raise fail(path, f"must be {what}")
    return value


def optional_string(value: JsonValue, path: str, **rules: object) -> str | None:
    return None if value is None else string(value, path, **rules)  # type: ignore[arg-type]


def integer(value: JsonValue, path: str, *, low: int = -MAX_SAFE_INTEGER, high: int = MAX_SAFE_INTEGER) -> int:
    # bool is an int subclass in Python; JSON true is never a number.
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(path, "must be an integer")
    if value < low:
        raise fail(path, f"must be at least {low}")
    if value > high:
        raise fail(path, f"must be at most {high}", Code.LIMIT_EXCEEDED)
    return value


def number(value: JsonValue, path: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, "must be a number")
    return value


def boolean(value: JsonValue, path: str) -> bool:
    if not isinstance(value, bool):
        raise fail(path, "must be true or false")
    return value


def array(value: JsonValue, path: str, *, max_items: int | None = None, min_items: int = 0) -> list[JsonValue]:
    if not isinstance(value, list):
        raise fail(path, "must be an array")
    if len(value) < min_items:
        raise fail(path, f"must hold at least {min_items} item{'s' if min_items != 1 else ''}")
    if max_items is not None and len(value) > max_items:
        raise fail(path, f"holds {len(value)} items; at most {max_items}", Code.LIMIT_EXCEEDED)
    return value


def empty_requires(value: JsonValue, path: str) -> tuple[()]:
    """`requires` must be an empty array: this runner implements no optional features."""
    items = array(value, path)
    if items:
        raise fail(path, "names features this runner does not implement", Code.UNSUPPORTED_FEATURE)
    return ()


def literal(value: JsonValue, path: str, expected: str, code: Code = Code.MALFORMED) -> str:
    if value != expected:
        raise fail(path, f"must be {expected!r}", code)
    return expected


def version(value: JsonValue, path: str, expected: str) -> str:
    """A schema tag: anything other than `expected` is `unsupported_version`."""
    if not isinstance(value, str):
        raise fail(path, "must be a schema string")
    return literal(value, path, expected, Code.UNSUPPORTED_VERSION)


def choice(value: JsonValue, path: str, options: Collection[str], code: Code = Code.MALFORMED) -> str:
    if not isinstance(value, str) or value not in options:
        raise fail(path, "must be one of " + ", ".join(sorted(options)), code)
    return value


def hex64(value: JsonValue, path: str, what: str = "64 lowercase hex characters") -> str:
    return string(value, path, pattern=HEX64, what=what)


def digest(value: JsonValue, path: str) -> str:
    if not is_digest(value):
        raise fail(path, "must be 'sha256:' and 64 lowercase hex characters")
    assert isinstance(value, str)
    return value


def indexed(
    value: JsonValue, path: str, *, max_items: int | None = None, min_items: int = 0
) -> list[tuple[str, JsonValue]]:
    """(path, item) pairs of an array, after the array rules; the caller parses each item."""
    found = array(value, path, max_items=max_items, min_items=min_items)
    return [(at(path, index), item) for index, item in enumerate(found)]
