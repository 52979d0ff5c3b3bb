"""The case-id grammar: what may name a case directory or a grader file."""

from __future__ import annotations

import pytest

from eval_runner.contracts.case_id import MAX_GRADER_NAME_BYTES, case_id, is_case_id
from eval_runner.contracts.errors import Code, ContractError


@pytest.mark.parametrize("value", ["a", "sort-imports", "A_b.c-9", "x" * 128, "results2", "a..b"])
def test_valid_case_ids(value: str) -> None:
    assert case_id(value, "id") == value


@pytest.mark.parametrize(
    "value",
    ["", ".hidden", "x" * 129, "with space", "slash/y", "é", "results", "node_modules", ".git", "a\n", 7, None],
)
def test_invalid_case_ids_are_malformed(value: object) -> None:
    with pytest.raises(ContractError) as caught:
        case_id(value, "cases[0].id")
    assert caught.value.code is Code.MALFORMED
    assert caught.value.path == "cases[0].id"


def test_grader_names_stop_at_64_bytes() -> None:
    assert is_case_id("g" * 64, MAX_GRADER_NAME_BYTES)
    assert not is_case_id("g" * 65, MAX_GRADER_NAME_BYTES)


def test_the_refusal_code_can_be_chosen() -> None:
    with pytest.raises(ContractError) as caught:
        case_id("../x", "id", code=Code.UNSUPPORTED_FEATURE)
    assert caught.value.code is Code.UNSUPPORTED_FEATURE
