"""The statistics beside the verdict, carried in the report's `meta` where the reference's readers accept them.

The evidence of statistics.md §C3 travels in `meta.eval_runner_statistics`, not in `measurements`, so a
phone or referee running the reference's checks still accepts the report and our own readers (the
trainer, report.html) still see the evidence. Why, and the key's shape, are in decisions.md ("The
statistics beside the verdict live in `meta.eval_runner_statistics`, not in `measurements`"). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue

#: The `meta` key that holds the statistics, and the schema of what it holds.
META_KEY = "eval_runner_statistics"
STATISTICS_SCHEMA = "eval-runner.statistics.v1"
MAX_ROWS = 64
_MAX_METRIC_BYTES = 128


@dataclass(frozen=True, slots=True)
class StatisticRow:
    metric: str
    value: int | float | None
    denominator: int
    unknown_count: int

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> StatisticRow:
        found = shape.closed(value, path, ("metric", "value", "denominator", "unknown_count"))
        metric = shape.string(found["metric"], shape.at(path, "metric"), min_bytes=1, max_bytes=_MAX_METRIC_BYTES)
        number = found["value"]
        if number is not None:
            number = shape.number(number, shape.at(path, "value"))
            if not math.isfinite(number):
                raise shape.fail(shape.at(path, "value"), "must be finite")
        return cls(
            metric=metric,
            value=number,
            denominator=shape.integer(found["denominator"], shape.at(path, "denominator"), low=0),
            unknown_count=shape.integer(found["unknown_count"], shape.at(path, "unknown_count"), low=0),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "metric": self.metric,
            "value": self.value,
            "denominator": self.denominator,
            "unknown_count": self.unknown_count,
        }


@dataclass(frozen=True, slots=True)
class Statistics:
    """The evidence beside a verdict, over the runs document `runs` names."""

    runs: ArtifactRef
    rows: tuple[StatisticRow, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str = META_KEY) -> Statistics:
        found = shape.closed(value, path, ("v", "runs", "rows"), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), STATISTICS_SCHEMA)
        items = shape.indexed(found["rows"], shape.at(path, "rows"), max_items=MAX_ROWS)
        rows = tuple(StatisticRow.parse(item, at) for at, item in items)
        if len({row.metric for row in rows}) != len(rows):
            raise shape.fail(shape.at(path, "rows"), "names a metric twice", Code.CONFLICT)
        return cls(runs=ArtifactRef.parse(found["runs"], shape.at(path, "runs")), rows=rows)

    @classmethod
    def from_meta(cls, meta: dict[str, JsonValue]) -> Statistics | None:
        """The statistics a report's `meta` carries, or None when it carries none or none a reader can use
        (they never decide anything, so a spoiled copy is simply not shown)."""
        value = meta.get(META_KEY)
        if value is None:
            return None
        try:
            return cls.parse(value)
        except ContractError:
            return None

    def value(self, metric: str) -> int | float | None:
        return next((row.value for row in self.rows if row.metric == metric), None)

    def to_json(self) -> dict[str, JsonValue]:
        return {"v": STATISTICS_SCHEMA, "runs": self.runs.to_json(), "rows": [row.to_json() for row in self.rows]}
