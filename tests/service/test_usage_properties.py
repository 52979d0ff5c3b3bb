"""Properties of the usage reader: arbitrary lines never raise (they count as unreadable), every record
reads back as itself, and stats account for every record."""

from __future__ import annotations

import json
from typing import Literal

from hypothesis import given
from hypothesis import strategies as st

from eval_runner.service.config import WHITE_SPACE
from eval_runner.service.usage import By, Record, parse_record, read_lines, stats

NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
TEXT = st.text(st.characters(exclude_categories=NO_SURROGATES), max_size=40)
COUNT = st.integers(min_value=0, max_value=2**64 - 1)

RECORDS = st.builds(
    Record,
    time=TEXT,
    key=TEXT,
    request=TEXT,
    action=st.sampled_from(["run", "check", "validation", "publish", "unread"]) | TEXT,
    subject=st.none() | TEXT,
    suite=st.none() | TEXT,
    tests=st.none() | COUNT,
    runs=st.none() | st.integers(min_value=0, max_value=2**32 - 1),
    turns=st.none() | COUNT,
    outcome=st.sampled_from(["completed", "failed", "cancelled", "refused"]) | TEXT,
    code=st.none() | TEXT,
    verdict=st.none() | TEXT,
    subject_passed=st.none() | COUNT,
    baseline_passed=st.none() | COUNT,
    result=st.none() | TEXT,
    total_ms=COUNT,
    bytes_in=COUNT,
)

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(st.text())
def test_any_text_parses_or_is_refused(line: str) -> None:
    record = parse_record(line)
    assert record is None or isinstance(record, Record)


@given(st.lists(st.text().map(lambda text: text.replace("\n", "")), max_size=8))
def test_lines_that_are_not_records_are_counted_unreadable(lines: list[str]) -> None:
    body = "\n".join(lines).encode("utf-8", "surrogatepass")
    records, unreadable = read_lines(body)
    written = [line.removesuffix("\r") for line in lines]
    assert len(records) + unreadable == sum(1 for line in written if line.strip(WHITE_SPACE))
    assert unreadable >= sum(1 for line in written if line.strip(WHITE_SPACE) and not line.lstrip().startswith("{"))


@given(st.binary())
def test_any_bytes_read_without_raising(body: bytes) -> None:
    records, unreadable = read_lines(body)
    assert len(records) + unreadable <= body.count(b"\n") + 1


@given(st.dictionaries(st.sampled_from([*Record.__dataclass_fields__, "extra"]), JSONISH, max_size=20))
def test_objects_with_the_fields_in_any_shape_never_raise(members: dict[str, object]) -> None:
    line = json.dumps(members)
    record = parse_record(line)
    assert record is None or record.to_json() == {
        name: value for name, value in members.items() if name != "extra" and value is not None
    }


@given(RECORDS)
def test_every_record_reads_back_as_itself(record: Record) -> None:
    line = record.line()
    assert line.endswith("\n")
    assert line.count("\n") == 1
    assert parse_record(line) == record
    assert read_lines(line.encode("utf-8")) == ([record], 0)


@given(st.lists(RECORDS, max_size=12), st.sampled_from(list(By)))
def test_stats_account_for_every_record(records: list[Record], by: By) -> None:
    rows = stats(records, by)
    assert rows[-1].group == "all"
    assert rows[-1].jobs == len(records)
    assert sum(row.jobs for row in rows[:-1]) == len(records)
    assert sum(row.refused for row in rows[:-1]) == rows[-1].refused
    assert sum(row.turns for row in rows[:-1]) == rows[-1].turns
