"""`canonical` writes plain values with the standard library's encoder; its bytes must be rfc8785's, always.

Whatever the value (any code point in strings and keys, lone surrogates and characters past the BMP
included; integers either side of ±(2^53 − 1); floats; nesting; shared containers), `canonical` returns
exactly rfc8785's bytes, or refuses exactly when rfc8785 refuses.
"""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, canonical

TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["", "\x00\x1f\x7f", '"\\/', "\u2028\u2029", "\ud7ff\ue000\uffff", "\U0001d11e", "\ud800", "é"]
)
EDGE = MAX_SAFE_INTEGER
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.sampled_from([EDGE, EDGE + 1, -EDGE, -EDGE - 1, 0, -0])
    | st.floats()
    | TEXT
)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4))


def reference(value: JsonValue) -> bytes | None:
    try:
        return bytes(rfc8785.dumps(value))
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return None


def ours(value: JsonValue) -> bytes | None:
    try:
        return canonical(value)
    except ContractError:
        return None


@settings(max_examples=2_000, deadline=None)
@given(JSON)
def test_canonical_is_rfc8785_byte_for_byte(value: JsonValue) -> None:
    assert ours(value) == reference(value)


@given(st.dictionaries(TEXT, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_sort_in_utf16_order_whatever_their_characters(value: dict[str, int]) -> None:
    assert ours(value) == reference(value)


def test_shared_containers_and_cycles_go_to_rfc8785() -> None:
    shared: list[JsonValue] = [1, "a"]
    assert canonical({"a": shared, "b": shared}) == b'{"a":[1,"a"],"b":[1,"a"]}'
    cycle: list[JsonValue] = []
    cycle.append(cycle)
    with pytest.raises(RecursionError):
        canonical(cycle)
