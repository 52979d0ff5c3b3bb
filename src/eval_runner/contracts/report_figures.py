"""The figures skill authors compare per arm (tokens, model calls, tool calls), carried in the report's `meta`.

The reference's measurements are exactly the metrics a suite's `metrics.json` defines and its validator
refuses any other, so these travel in `meta.eval_runner_figures` (wire.md §13.1: readers ignore `meta` keys
other than `ext_eval`), as the statistics do in `meta.eval_runner_statistics`. Each row is one arm's total
of one figure over the runs that reported it: `value` the total (null when no run did), `denominator` the
runs counted, `unknown_count` the arm's runs that said nothing — an unknown is never counted as 0. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.strict_json import JsonValue

#: The `meta` key that holds the figures, and the schema of what it holds.
META_KEY = "eval_runner_figures"
FIGURES_SCHEMA = "eval-runner.figures.v1"
#: The figures, in the order readers show them.
METRICS = ("input_tokens", "output_tokens", "turns", "tool_calls")
ARMS = ("subject", "baseline")
MAX_ROWS = len(METRICS) * len(ARMS)


@dataclass(frozen=True, slots=True)
class FigureRow:
    """One arm's total of one figure over the runs that reported it."""

    arm: str
    metric: str
    value: int | None
    denominator: int
    unknown_count: int

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> FigureRow:
        found = shape.closed(value, path, ("arm", "metric", "value", "denominator", "unknown_count"))
        total = found["value"]
        denominator = shape.integer(found["denominator"], shape.at(path, "denominator"), low=0)
        if total is not None:
            total = shape.integer(total, shape.at(path, "value"), low=0)
        if (total is None) != (denominator == 0):
            raise shape.fail(shape.at(path, "value"), "must be null exactly when no run is counted")
        return cls(
            arm=shape.choice(found["arm"], shape.at(path, "arm"), ARMS),
            metric=shape.choice(found["metric"], shape.at(path, "metric"), METRICS),
            value=total,
            denominator=denominator,
            unknown_count=shape.integer(found["unknown_count"], shape.at(path, "unknown_count"), low=0),
        )

    @property
    def per_run(self) -> float | None:
        """The mean over the runs that reported the figure."""
        return None if self.value is None or self.denominator == 0 else self.value / self.denominator

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "arm": self.arm,
            "metric": self.metric,
            "value": self.value,
            "denominator": self.denominator,
            "unknown_count": self.unknown_count,
        }


@dataclass(frozen=True, slots=True)
class Figures:
    """Every arm's figures."""

    rows: tuple[FigureRow, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str = META_KEY) -> Figures:
        found = shape.closed(value, path, ("v", "rows"), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), FIGURES_SCHEMA)
        items = shape.indexed(found["rows"], shape.at(path, "rows"), max_items=MAX_ROWS)
        rows = tuple(FigureRow.parse(item, at) for at, item in items)
        if len({(row.arm, row.metric) for row in rows}) != len(rows):
            raise shape.fail(shape.at(path, "rows"), "names an arm's metric twice", Code.CONFLICT)
        return cls(rows)

    @classmethod
    def from_meta(cls, meta: dict[str, JsonValue]) -> Figures | None:
        """The figures a report's `meta` carries; None when it carries none or a spoiled copy (they never
        decide anything, so a reader simply does not show them)."""
        value = meta.get(META_KEY)
        if value is None:
            return None
        try:
            return cls.parse(value)
        except ContractError:
            return None

    def row(self, arm: str, metric: str) -> FigureRow | None:
        return next((row for row in self.rows if row.arm == arm and row.metric == metric), None)

    def to_json(self) -> dict[str, JsonValue]:
        return {"v": FIGURES_SCHEMA, "rows": [row.to_json() for row in self.rows]}
