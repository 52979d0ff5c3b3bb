"""The usage log (runner.md §19): exact record lines, day rotation by arrival date, reading with `since`,
the stats and the table, and appends from threads and processes that never interleave."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from eval_runner.service.usage import (
    By,
    Record,
    Row,
    UsageError,
    UsageLog,
    UsageRead,
    arrival_time,
    date_problem,
    is_date,
    parse_record,
    read,
    rows_json,
    stats,
    table,
)

DAY_ONE = 1_790_812_800_000  # 2026-10-01T00:00:00Z
TRAINER = "e8fa9b8e6489241ded98ea5b4d71510435860dbeb222264c2268cf323b8ec83d"


def job(key: str, at: int, action: str, outcome: str, ms: int, **more: object) -> Record:
    base = Record.arrived(key=key, request="e1", bytes_in=900, arrival_ms=at, outcome=outcome)
    return replace(base, action=action, turns=12, total_ms=ms, **more)  # type: ignore[arg-type]


def test_the_arrival_time_is_utc_with_milliseconds() -> None:
    assert arrival_time(DAY_ONE) == "2026-10-01T00:00:00.000Z"
    assert arrival_time(DAY_ONE + 86_399_999) == "2026-10-01T23:59:59.999Z"
    assert arrival_time(DAY_ONE + 7) == "2026-10-01T00:00:00.007Z"
    assert arrival_time(0) == "1970-01-01T00:00:00.000Z"


def test_every_field_in_order() -> None:
    record = Record(
        time="2026-10-01T21:33:04.120Z",
        key=TRAINER,
        request="ab" * 32,
        action="run",
        subject="a7cf:project-map",
        suite="cd" * 32,
        tests=6,
        runs=1,
        turns=12,
        outcome="completed",
        code="x",
        verdict="inconclusive",
        subject_passed=2,
        baseline_passed=2,
        result="ef" * 32,
        total_ms=24_084,
        bytes_in=2_944,
    )
    assert record.line() == (
        '{"time":"2026-10-01T21:33:04.120Z","key":"' + TRAINER + '","request":"' + "ab" * 32 + '",'
        '"action":"run","subject":"a7cf:project-map","suite":"' + "cd" * 32 + '","tests":6,"runs":1,"turns":12,'
        '"outcome":"completed","code":"x","verdict":"inconclusive","subject_passed":2,"baseline_passed":2,'
        '"result":"' + "ef" * 32 + '","total_ms":24084,"bytes_in":2944}\n'
    )
    assert parse_record(record.line()) == record


def test_absent_fields_are_left_out() -> None:
    refused = replace(
        Record.arrived(key=TRAINER, request="e1", bytes_in=311, arrival_ms=DAY_ONE, outcome="refused"),
        code="not_admitted",
        total_ms=3,
    )
    assert refused.line() == (
        '{"time":"2026-10-01T00:00:00.000Z","key":"' + TRAINER + '","request":"e1","action":"unread",'
        '"outcome":"refused","code":"not_admitted","total_ms":3,"bytes_in":311}\n'
    )
    keys = ["time", "key", "request", "action", "outcome", "code", "total_ms", "bytes_in"]
    assert list(json.loads(refused.line())) == keys


def test_a_record_refuses_counts_that_would_not_read_back() -> None:
    with pytest.raises(ValueError, match="total_ms"):
        job("a", DAY_ONE, "run", "completed", -1)
    with pytest.raises(ValueError, match="runs"):
        job("a", DAY_ONE, "run", "completed", 1, runs=2**32)
    with pytest.raises(TypeError, match="subject"):
        job("a", DAY_ONE, "run", "completed", 1, subject=5)


def test_the_log_rotates_by_arrival_day_and_the_stats_read_it_back(tmp_path: Path) -> None:
    log = UsageLog(tmp_path / "usage")
    first = job("a", DAY_ONE, "run", "completed", 100)
    log.append(first)
    log.append(job("a", DAY_ONE + 86_399_999, "run", "completed", 300))
    log.append(job("b", DAY_ONE + 86_400_000, "check", "refused", 2))
    (log.directory / "notes.txt").write_text("not a day")
    (log.directory / "2026-10-0x.jsonl").write_text("not a day either")

    assert sorted(os.listdir(log.directory)) == [
        "2026-10-01.jsonl",
        "2026-10-02.jsonl",
        "2026-10-0x.jsonl",
        "notes.txt",
    ]
    assert (log.directory / "2026-10-01.jsonl").read_text().splitlines()[0] + "\n" == first.line()
    assert stat.S_IMODE(log.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((log.directory / "2026-10-01.jsonl").stat().st_mode) == 0o600

    found = read(log.directory)
    assert (len(found.records), found.unreadable) == (3, 0)
    rows = stats(found.records, By.ACTION)
    assert rows[0].group == "run"
    assert (rows[0].jobs, rows[0].completed, rows[0].keys) == (2, 2, 1)
    assert (rows[0].turns, rows[0].total_p50_ms) == (24, 300)
    assert (rows[1].group, rows[1].refused) == ("check", 1)
    assert rows[1].turns == 0  # a refused job ran no turns
    assert (rows[-1].group, rows[-1].jobs, rows[-1].keys) == ("all", 3, 2)
    assert stats(found.records, By.DAY)[0].group == "2026-10-01"
    assert table(rows, By.ACTION).startswith("action  jobs")
    assert len(read(log.directory, "2026-10-02").records) == 1
    assert len(read(log.directory, "2026-10-01").records) == 3
    assert read(log.directory, "2026-10-03").records == ()
    with pytest.raises(UsageError, match=r"^yesterday is not a YYYY-MM-DD date$"):
        read(log.directory, "yesterday")
    with pytest.raises(UsageError, match=r"^--by is key, action, subject, day, or outcome, not color$"):
        By.parse("color")


def test_records_read_oldest_day_first(tmp_path: Path) -> None:
    log = UsageLog(tmp_path)
    for day in (3, 1, 2):
        log.append(job(f"k{day}", DAY_ONE + day * 86_400_000, "run", "completed", day))
    assert [record.key for record in read(tmp_path).records] == ["k1", "k2", "k3"]


def test_unreadable_lines_are_counted_and_blank_lines_skipped(tmp_path: Path) -> None:
    good = job("a", DAY_ONE, "run", "completed", 5).line()
    (tmp_path / "2026-10-01.jsonl").write_bytes(
        good.encode() + b"\n  \n{not json}\n" + b"\xff\xfe\n" + b'{"time":"x"}\r\n' + good.encode().rstrip(b"\n")
    )
    found = read(tmp_path)
    assert (len(found.records), found.unreadable) == (2, 3)


def test_a_directory_not_made_yet_is_no_log_and_one_that_cannot_be_read_is_an_error(tmp_path: Path) -> None:
    assert read(tmp_path / "absent") == UsageRead((), 0, 0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError) as caught:
        read(blocker)
    assert str(caught.value) == f"{blocker}: Not a directory"


@pytest.mark.parametrize(
    ("line", "reads"),
    [
        ('{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2}', True),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2,'
            '"subject":null,"later_field":[1,{"x":2}]}',
            True,
        ),
        ('{"key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2}', False),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":null,"bytes_in":2}',
            False,
        ),
        ('{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":-1,"bytes_in":2}', False),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1.0,"bytes_in":2}',
            False,
        ),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":true,"bytes_in":2}',
            False,
        ),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2,"runs":4294967296}',
            False,
        ),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2,"tests":NaN}',
            False,
        ),
        (
            '{"time":"t","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2,"subject":7}',
            False,
        ),
        (
            '{"time":"t","time":"u","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2}',
            False,
        ),
        (
            '{"time":"\\ud800","key":"k","request":"r","action":"run","outcome":"completed","total_ms":1,"bytes_in":2}',
            False,
        ),
        ("[]", False),
        ('"text"', False),
        ("[" * 100_000, False),
    ],
)
def test_what_reads_as_a_record(line: str, reads: bool) -> None:
    assert (parse_record(line) is not None) == reads


# --- stats and the table ------------------------------------------------------------------------------


def test_grouping_by_each_word() -> None:
    records = [
        job("k1", DAY_ONE + 86_400_000, "run", "completed", 10, subject="tool-a"),
        job("k1", DAY_ONE, "run", "failed", 20, subject="tool-a", code="run_failed"),
        job("k2", DAY_ONE, "publish", "refused", 1, code="not_admitted"),
        job("k2", DAY_ONE, "check", "cancelled", 5, subject="tool-b"),
    ]
    groups = {by: [row.group for row in stats(records, by)] for by in By}
    assert groups[By.KEY] == ["k1", "k2", "all"]
    assert groups[By.ACTION] == ["run", "check", "publish", "all"]
    assert groups[By.SUBJECT] == ["tool-a", "-", "tool-b", "all"]
    assert groups[By.DAY] == ["2026-10-01", "2026-10-02", "all"]
    assert groups[By.OUTCOME] == ["cancelled", "completed", "failed run_failed", "refused not_admitted", "all"]
    everything = stats(records, By.KEY)[-1]
    # `cancelled` is no column but is a job; refused turns are not counted.
    assert everything == Row("all", 4, 1, 1, 1, 2, 36, 10)


def test_day_groups_sort_by_date_even_when_smaller() -> None:
    records = [job("a", DAY_ONE + 86_400_000, "run", "completed", 1) for _ in range(3)]
    records.append(job("a", DAY_ONE, "run", "completed", 1))
    assert [row.group for row in stats(records, By.DAY)] == ["2026-10-01", "2026-10-02", "all"]
    assert [row.group for row in stats(records, By.KEY)] == ["a", "all"]


def test_the_median_is_the_upper_one_over_completed_jobs() -> None:
    totals = [40, 10, 30, 20]
    records = [job("a", DAY_ONE, "run", "completed", ms) for ms in totals]
    records.append(job("a", DAY_ONE, "run", "failed", 1_000))
    assert stats(records, By.KEY)[0].total_p50_ms == 30
    assert stats(records[:3], By.KEY)[0].total_p50_ms == 30
    assert stats([records[-1]], By.KEY)[0].total_p50_ms is None


def test_a_time_too_short_for_a_date_groups_as_a_dash() -> None:
    short = replace(job("a", DAY_ONE, "run", "completed", 1), time="2026")
    cut = replace(job("a", DAY_ONE, "run", "completed", 1), time="2026-10-0é")
    assert [row.group for row in stats([short, cut], By.DAY)] == ["-", "all"]


def test_the_table_matches_the_deployment_record() -> None:
    records = [
        job(TRAINER, DAY_ONE + 77_584_000 + index, "run", "completed", ms)
        for index, ms in enumerate([23_911, 24_084, 25_002, 22_730])
    ]
    text = table(stats(records, By.KEY), By.KEY)
    header = "key" + " " * 61 + "  jobs  completed  failed  refused  keys  turns  total_p50_ms"
    assert text.splitlines() == [
        header,
        TRAINER + "     4          4       0        0     1     48         24084",
        "all" + " " * 61 + "     4          4       0        0     1     48         24084",
    ]
    # The two lines of runner.md §19.3's example, verbatim.
    assert text.startswith(
        "key                                                               jobs  completed  failed  refused  keys  "
        "turns  total_p50_ms\n"
        "e8fa9b8e6489241ded98ea5b4d71510435860dbeb222264c2268cf323b8ec83d     4          4       0        0     1  "
        "   48         24084\n"
    )
    assert text.endswith("\n")


def test_the_table_prints_an_unknown_median_as_a_dash_and_trims_trailing_spaces() -> None:
    text = table(stats([job("k", DAY_ONE, "publish", "refused", 2)], By.OUTCOME), By.OUTCOME)
    assert text == (
        "outcome  jobs  completed  failed  refused  keys  turns  total_p50_ms\n"
        "refused     1          0       0        1     1      0             -\n"
        "all         1          0       0        1     1      0             -\n"
    )
    assert table(stats([], By.DAY), By.DAY) == (
        "day  jobs  completed  failed  refused  keys  turns  total_p50_ms\n"
        "all     0          0       0        0     0      0             -\n"
    )


def test_json_rows() -> None:
    rows = stats([job("k", DAY_ONE, "run", "completed", 7), job("k", DAY_ONE, "run", "refused", 1)], By.ACTION)
    assert json.loads(rows_json(rows)) == [
        {
            "group": "run",
            "jobs": 2,
            "completed": 1,
            "failed": 0,
            "refused": 1,
            "keys": 1,
            "turns": 12,
            "total_p50_ms": 7,
        },
        {
            "group": "all",
            "jobs": 2,
            "completed": 1,
            "failed": 0,
            "refused": 1,
            "keys": 1,
            "turns": 12,
            "total_p50_ms": 7,
        },
    ]
    assert rows_json(rows).startswith('[\n  {\n    "group": "run",\n    "jobs": 2,')
    assert json.loads(rows_json(stats([], By.DAY)))[0]["total_p50_ms"] is None


def test_is_date_is_by_shape_and_by_the_calendar() -> None:
    assert is_date("2026-10-01")
    assert is_date("2028-02-29")
    for text in ("2026-1-01", "2026/10/01", "2026-10-01 ", "２０２６-10-01", "", "yesterday"):
        assert not is_date(text)
        assert date_problem(text) == f"{text} is not a YYYY-MM-DD date"
    for text, why in (
        ("9999-99-99", "month must be in 1..12"),
        ("2026-13-01", "month must be in 1..12"),
        ("2026-02-29", "day is out of range for month"),
        ("2026-04-31", "day is out of range for month"),
        ("0000-01-01", "year 0 is out of range"),
    ):
        assert not is_date(text)
        assert date_problem(text) == f"{text} is not a date on the calendar: {why}"


# --- writing: failures and concurrency ----------------------------------------------------------------


def test_a_write_failure_only_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    caplog.set_level(logging.INFO, logger="eval_runner")
    assert not UsageLog(blocker / "usage").keep(job("a", DAY_ONE, "run", "completed", 1))
    assert caplog.messages == [f"usage log: {blocker / 'usage'}: Not a directory"]
    assert UsageLog(tmp_path / "ok").keep(job("a", DAY_ONE, "run", "completed", 1))
    assert len(caplog.messages) == 1


def test_concurrent_appends_from_threads_never_interleave(tmp_path: Path) -> None:
    log = UsageLog(tmp_path)
    gate = threading.Barrier(8)

    def write(writer: int) -> None:
        gate.wait()
        for index in range(200):
            log.append(job(f"w{writer}", DAY_ONE + index, "run", "completed", index, suite="s" * (writer * 500)))

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = read(tmp_path)
    assert (len(found.records), found.unreadable) == (1_600, 0)
    assert {record.key for record in found.records} == {f"w{writer}" for writer in range(8)}


WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from eval_runner.service.usage import Record, UsageLog

directory, writer = Path(sys.argv[1]), int(sys.argv[2])
log = UsageLog(directory)
for index in range(300):
    record = Record.arrived(key=f"p{writer}", request=str(index), bytes_in=1, arrival_ms=1_790_812_800_000,
                            outcome="completed")
    log.append(replace(record, action="run", subject="x" * (1_000 + 997 * writer), total_ms=index))
"""


def test_concurrent_appends_from_processes_never_interleave(tmp_path: Path) -> None:
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(writer)], stderr=subprocess.PIPE)
        for writer in range(6)
    ]
    for process in writers:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    found = read(tmp_path)
    assert (len(found.records), found.unreadable) == (1_800, 0)
    for writer in range(6):
        mine = [record for record in found.records if record.key == f"p{writer}"]
        assert [record.total_ms for record in mine] == list(range(300))
        assert all(record.subject == "x" * (1_000 + 997 * writer) for record in mine)
