"""The strict reader refuses every departure of wire.md §4.1, and JCS/digests are exact."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.strict_json import (
    MAX_DEPTH,
    canonical,
    digest_bytes,
    digest_canonical,
    is_digest,
    pretty,
    read,
)


def test_reads_a_plain_object() -> None:
    assert read(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"a": 1, "a": 2}', "duplicate object key"),
        (b'{"a": NaN}', "non-finite"),
        (b'{"a": Infinity}', "non-finite"),
        (b'{"a": -Infinity}', "non-finite"),
        (b'{"a": 1e400}', "not finite"),
        (b'{"a": 9007199254740992}', "outside"),
        (b'{"a": -9007199254740992}', "outside"),
        (b'{"a": "\\ud800"}', "unpaired surrogate"),
        (b'{"\\udc00": 1}', "unpaired surrogate"),
        (b'\xef\xbb\xbf{"a": 1}', "byte order mark"),
        (b'{"a": 1} x', "not JSON"),
        (b'{"a": 1}{}', "not JSON"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b"", "not JSON"),
    ],
)
def test_refuses_what_the_wire_forbids(body: bytes, fragment: str) -> None:
    with pytest.raises(ContractError) as caught:
        read(body)
    assert caught.value.code is Code.MALFORMED
    assert fragment in caught.value.message


def test_safe_integer_bounds_are_inclusive() -> None:
    assert read(b"[9007199254740991, -9007199254740991]") == [9007199254740991, -9007199254740991]


def test_depth_64_is_read_and_65_refused() -> None:
    assert read(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(ContractError, match="nesting deeper"):
        read(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))


def test_extreme_nesting_is_a_typed_error_not_a_crash() -> None:
    with pytest.raises(ContractError):
        read(b"[" * 200_000 + b"]" * 200_000, max_bytes=10**6)


def test_body_over_the_limit_is_refused_before_parsing() -> None:
    with pytest.raises(ContractError) as caught:
        read(b'"' + b"a" * 1_048_576 + b'"')
    assert caught.value.code is Code.LIMIT_EXCEEDED


def test_canonical_orders_keys_by_utf16_and_writes_shortest_numbers() -> None:
    # RFC 8785 §3.2.3 sorts by UTF-16 code units: U+1D11E (surrogates D834 DD1E) sorts before U+FB33.
    value = {"\ufb33": 1, "\U0001d11e": 2, "a": 1e30, "b": 0.002, "c": 4.5, "d": 10.0}
    assert canonical(value) == '{"a":1e+30,"b":0.002,"c":4.5,"d":10,"\U0001d11e":2,"\ufb33":1}'.encode()


def test_canonical_refuses_integers_jcs_cannot_hold() -> None:
    with pytest.raises(ContractError):
        canonical({"a": 2**53 + 1})


def test_digests() -> None:
    assert digest_bytes(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert digest_canonical({"b": 1, "a": 2}) == digest_bytes(b'{"a":2,"b":1}')
    assert is_digest(digest_bytes(b"x"))
    assert not is_digest("sha256:" + "A" * 64)
    assert not is_digest("sha512:" + "a" * 64)


def test_pretty_is_sorted_two_space_with_newline() -> None:
    assert pretty({"b": 1, "a": [1]}) == b'{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'


# Floats stay below 2^53 in magnitude: JCS writes an integral float as an integer literal, and an
# integer literal beyond 2^53 - 1 is (rightly) refused on the way back in.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(min_value=-(2.0**53) + 1, max_value=2.0**53 - 1)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_raise_only_contract_error(data: bytes) -> None:
    with contextlib.suppress(ContractError):
        read(data)


@settings(max_examples=300)
@given(json_values)
def test_standard_json_reads_back_and_canonical_is_stable(value: object) -> None:
    text = json.dumps(value)
    parsed = read(text)
    assert canonical(read(canonical(parsed))) == canonical(parsed)
