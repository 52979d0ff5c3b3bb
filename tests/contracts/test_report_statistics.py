"""The statistics beside the verdict, in `meta.eval_runner_statistics`: typed, closed, and never fatal to a reader."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.report_statistics import META_KEY, STATISTICS_SCHEMA, StatisticRow, Statistics

RUNS = ArtifactRef.of_bytes(b'{"runs": []}\n', "application/json", "openagents.ext-eval-runs.v1")


def sample() -> Statistics:
    return Statistics(
        runs=RUNS,
        rows=(StatisticRow("p_helps", 0.05, 2, 0), StatisticRow("min_detectable_effect", None, 2, 0)),
    )


def test_statistics_round_trip_and_are_found_in_meta() -> None:
    value = sample().to_json()
    assert value["v"] == STATISTICS_SCHEMA
    assert Statistics.parse(value) == sample()
    found = Statistics.from_meta({META_KEY: value, "other": 1})
    assert found == sample()
    assert found.value("p_helps") == 0.05
    assert found.value("min_detectable_effect") is None
    assert found.value("absent") is None


@pytest.mark.parametrize(
    ("change", "code", "path"),
    [
        ({"v": "eval-runner.statistics.v2"}, Code.UNSUPPORTED_VERSION, "eval_runner_statistics.v"),
        ({"extra": 1}, Code.UNSUPPORTED_FEATURE, "eval_runner_statistics.extra"),
        ({"rows": [{"metric": "p", "value": "x", "denominator": 1, "unknown_count": 0}]}, Code.MALFORMED, None),
        ({"rows": [{"metric": "", "value": 1, "denominator": 1, "unknown_count": 0}]}, Code.MALFORMED, None),
        ({"rows": [{"metric": "p", "value": 1, "denominator": -1, "unknown_count": 0}]}, Code.MALFORMED, None),
        ({"rows": [{"metric": "p", "value": 1, "denominator": 1, "unknown_count": 0}] * 2}, Code.CONFLICT, None),
        (
            {"rows": [{"metric": f"m{n}", "value": 1, "denominator": 1, "unknown_count": 0} for n in range(65)]},
            Code.LIMIT_EXCEEDED,
            None,
        ),
    ],
)
def test_a_spoiled_copy_is_refused_by_the_parser_and_ignored_by_a_reader(
    change: dict[str, Any], code: Code, path: str | None
) -> None:
    value = {**sample().to_json(), **change}
    with pytest.raises(ContractError) as caught:
        Statistics.parse(value)
    assert caught.value.code is code
    if path is not None:
        assert caught.value.path == path
    assert Statistics.from_meta({META_KEY: value}) is None


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    )
)
def test_junk_raises_only_the_typed_error(value: Any) -> None:
    with contextlib.suppress(ContractError):
        Statistics.parse(value)
    assert Statistics.from_meta({META_KEY: value}) is None or isinstance(value, dict)
