"""Strict JSON in (wire.md §4.1), canonical JSON out (RFC 8785, §4.2), and `sha256:` digests.

The reader is the standard library's parser with hooks, because its C scanner is fast and exact;
the hooks add what the wire demands and `json` allows: duplicate keys, non-finite numbers, unsafe
integers, unpaired surrogates, a BOM, depth beyond 64 and bodies over 1 MiB are all refused with
`malformed`. Canonical bytes come from `rfc8785`, which raises on integers beyond 2^53 rather than
rounding them (ecosystem.md §1).
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


def canonical(value: JsonValue) -> bytes:
    """RFC 8785 (JCS) bytes of a JSON value; refuses what JCS cannot represent exactly."""
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
