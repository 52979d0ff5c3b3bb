"""`meta.eval_runner_figures`: per arm tokens, model calls and tool calls, read strictly and never as a zero."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.report_figures import FIGURES_SCHEMA, META_KEY, FigureRow, Figures


def row(**changes: Any) -> dict[str, Any]:
    return {"arm": "subject", "metric": "input_tokens", "value": 1200, "denominator": 3, "unknown_count": 1, **changes}


def test_a_row_reads_back_and_gives_its_mean_over_the_runs_that_reported_it() -> None:
    figures = Figures.parse({"v": FIGURES_SCHEMA, "rows": [row(), row(arm="baseline", value=None, denominator=0)]})
    assert figures.to_json()["rows"] == [row(), row(arm="baseline", value=None, denominator=0)]
    subject = figures.row("subject", "input_tokens")
    assert subject == FigureRow("subject", "input_tokens", 1200, 3, 1)
    assert subject.per_run == 400
    baseline = figures.row("baseline", "input_tokens")
    assert baseline is not None
    assert baseline.per_run is None
    assert figures.row("subject", "turns") is None


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        ({"v": "eval-runner.figures.v2", "rows": []}, Code.UNSUPPORTED_VERSION, f"{META_KEY}.v"),
        ({"v": FIGURES_SCHEMA, "rows": [], "extra": 1}, Code.UNSUPPORTED_FEATURE, f"{META_KEY}.extra"),
        ({"v": FIGURES_SCHEMA, "rows": [row(value=0, denominator=0)]}, Code.MALFORMED, f"{META_KEY}.rows[0].value"),
        ({"v": FIGURES_SCHEMA, "rows": [row(value=None)]}, Code.MALFORMED, f"{META_KEY}.rows[0].value"),
        ({"v": FIGURES_SCHEMA, "rows": [row(value=-1)]}, Code.MALFORMED, f"{META_KEY}.rows[0].value"),
        ({"v": FIGURES_SCHEMA, "rows": [row(value=1.5)]}, Code.MALFORMED, f"{META_KEY}.rows[0].value"),
        ({"v": FIGURES_SCHEMA, "rows": [row(arm="comparison")]}, Code.MALFORMED, f"{META_KEY}.rows[0].arm"),
        ({"v": FIGURES_SCHEMA, "rows": [row(metric="cost_usd")]}, Code.MALFORMED, f"{META_KEY}.rows[0].metric"),
        ({"v": FIGURES_SCHEMA, "rows": [row(), row()]}, Code.CONFLICT, f"{META_KEY}.rows"),
        ({"v": FIGURES_SCHEMA, "rows": [row()] * 9}, Code.LIMIT_EXCEEDED, f"{META_KEY}.rows"),
    ],
)
def test_a_spoiled_copy_is_refused_with_its_field(value: dict[str, Any], code: Code, path: str) -> None:
    with pytest.raises(ContractError) as caught:
        Figures.parse(value)
    assert (caught.value.code, caught.value.path) == (code, path)
    assert Figures.from_meta({META_KEY: value}) is None


def test_a_report_without_figures_has_none() -> None:
    assert Figures.from_meta({}) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@given(JSON)
def test_anything_in_the_key_reads_or_is_refused_with_a_contract_error(value: Any) -> None:
    with contextlib.suppress(ContractError):
        found = Figures.parse({"v": FIGURES_SCHEMA, "rows": [value]})
        assert found.to_json()["rows"] == [value]
    assert Figures.from_meta({META_KEY: value}) is None  # no generated value is a whole figures object
