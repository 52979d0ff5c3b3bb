"""Strict JSON in (wire.md §4.1), canonical JSON out (RFC 8785, §4.2), and `sha256:` digests.

The reader is the standard library's parser with hooks, because its C scanner is fast and exact; the
hooks refuse, as `malformed`, what the wire forbids and `json` allows. Canonical bytes come from
`rfc8785`, which raises on integers beyond 2^53 rather than rounding them (ecosystem.md §1; decisions.md,
"Floats at or above 2^53 in magnitude").
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import rfc8785

from eval_runner.contracts.errors import Code, ContractError

#: A decoded JSON value. `Any` because JSON is recursive; parsers narrow it at once.
JsonValue = Any

MAX_BODY_BYTES = 1_048_576
MAX_DEPTH = 64
MAX_SAFE_INTEGER = 9_007_199_254_740_991

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _pairs(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for key, value in pairs:
        if key in out:
            raise ContractError(Code.MALFORMED, "", f"duplicate object key {key!r}")
        out[key] = value
    return out


def _constant(name: str) -> float:
    raise ContractError(Code.MALFORMED, "", f"non-finite number {name} is not JSON")


def _integer(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise ContractError(Code.MALFORMED, "", f"integer {text[:32]} is outside ±(2^53 − 1)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ContractError(Code.MALFORMED, "", f"number {text[:32]} is not finite")
    return value


def _check_tree(root: JsonValue) -> None:
    """Depth and string validity, iteratively so a hostile document cannot exhaust the stack."""
    stack: list[tuple[JsonValue, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ContractError(Code.MALFORMED, "", f"nesting deeper than {MAX_DEPTH}")
            if isinstance(value, dict):
                for key, item in value.items():
                    _check_text(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ContractError(Code.MALFORMED, "", "string holds an unpaired surrogate") from None


def read(data: bytes | str, *, max_bytes: int = MAX_BODY_BYTES) -> JsonValue:
    """Parse one strict JSON document; any departure raises `ContractError(malformed)`."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise ContractError(Code.LIMIT_EXCEEDED, "", f"body is {len(raw)} bytes; the limit is {max_bytes}")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ContractError(Code.MALFORMED, "", "body starts with a byte order mark")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ContractError(Code.MALFORMED, "", f"body is not UTF-8 at byte {error.start}") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_constant=_constant,
            parse_int=_integer,
            parse_float=_float,
        )
    except ContractError:
        raise
    except RecursionError:
        raise ContractError(Code.MALFORMED, "", f"nesting deeper than {MAX_DEPTH}") from None
    except (ValueError, TypeError) as error:
        raise ContractError(Code.MALFORMED, "", f"not JSON: {error}") from None
    _check_tree(value)
    return value


# The standard library's C encoder writes strings, safe integers, booleans, null, arrays and objects byte for
# byte as RFC 8785 does (the same escapes: \b \t \n \f \r, \u00xx in lowercase for other controls, nothing
# else), and sorts keys by code point, which is UTF-16 order while no key holds a character past U+D7FF.
# `canonical` takes it for a value that holds nothing else: several times faster than rfc8785's pure-Python
# writer on a request body, which the runner canonicalises on every request. Anything else (floats, unsafe
# integers, lone surrogates, other key characters, other types, shared or cyclic containers) goes to rfc8785.
_JCS_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)


def _plain(value: JsonValue) -> bool:
    """True when the standard encoder's bytes for `value` are its JCS bytes (see above)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            return False
        if (kind is not list and kind is not dict) or id(item) in seen:
            return False
        seen.add(id(item))
        if kind is list:
            stack.extend(item)
            continue
        for key in item:
            if type(key) is not str or not (key.isascii() or max(key) < "\ud800"):
                return False
        stack.extend(item.values())
    return True


def canonical(value: JsonValue) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value; refuses what JCS cannot represent exactly."""
    if _plain(value):
        try:
            return _JCS_ENCODER.encode(value).encode("utf-8")
        except (UnicodeEncodeError, RecursionError):
            pass  # a lone surrogate, or nesting too deep: rfc8785 says which
    try:
        return bytes(rfc8785.dumps(value))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as error:
        raise ContractError(Code.MALFORMED, "", f"cannot canonicalise: {error}") from None


def digest_bytes(data: bytes) -> str:
    """`sha256:` + lowercase hex of exact bytes (the byte digest of every ArtifactRef)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_canonical(value: JsonValue) -> str:
    """`sha256:` digest of the JCS bytes of a value (fingerprints, input digests, fixed documents)."""
    return digest_bytes(canonical(value))


def is_digest(text: object) -> bool:
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def pretty(value: JsonValue) -> bytes:
    """Pretty JSON as the engine writes its documents: 2-space indent, sorted keys, trailing newline."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
