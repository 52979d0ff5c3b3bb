"""Usage lines of publishes, checks and validations (issue 10): `result` names the `3189`, a publish that
rewrote its report says the new digest in `report`, and `usage --by action` keeps the four actions apart."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from eval_runner.service.usage import By, Record, UsageArguments, UsageLog, parse_record, stats, usage_main

DAY_ONE = 1_790_812_800_000  # 2026-10-01T00:00:00Z
TRAINER = "e8fa9b8e6489241ded98ea5b4d71510435860dbeb222264c2268cf323b8ec83d"
RESULT = "ef" * 32
DIGEST = "sha256:" + "12" * 32


def line(action: str, outcome: str, **more: object) -> Record:
    base = Record.arrived(key=TRAINER, request="e1", bytes_in=900, arrival_ms=DAY_ONE, outcome=outcome)
    return replace(base, action=action, total_ms=40, **more)  # type: ignore[arg-type]


def test_a_publish_line_names_its_result_and_the_rewritten_reports_digest() -> None:
    record = line("publish", "completed", result=RESULT, report=DIGEST)
    assert record.line() == (
        '{"time":"2026-10-01T00:00:00.000Z","key":"' + TRAINER + '","request":"e1","action":"publish",'
        '"outcome":"completed","result":"' + RESULT + '","report":"' + DIGEST + '","total_ms":40,"bytes_in":900}\n'
    )
    assert parse_record(record.line()) == record
    assert "report" not in line("publish", "completed", result=RESULT).to_json()


def test_usage_by_action_shows_publishes_checks_and_validations(tmp_path: Path) -> None:
    log = UsageLog(tmp_path / "usage")
    records = [
        line("run", "completed", turns=8),
        line("publish", "refused", code="not_admitted"),
        line("publish", "completed", result=RESULT, report=DIGEST),
        line("check", "completed", result=RESULT, turns=8),
        line("validation", "refused", code="not_admitted", result=RESULT),
        line("publish", "failed", code="too_large"),
    ]
    for record in records:
        log.append(record)
    rows = {row.group: row for row in stats(records, By.ACTION)}
    assert [(group, row.jobs, row.completed, row.failed, row.refused) for group, row in rows.items()] == [
        ("publish", 3, 1, 1, 1),
        ("check", 1, 1, 0, 0),
        ("run", 1, 1, 0, 0),
        ("validation", 1, 0, 0, 1),
        ("all", 6, 3, 1, 2),
    ]
    out, err = io.StringIO(), io.StringIO()
    assert usage_main(UsageArguments(None, By.ACTION, False, tmp_path / "usage"), stdout=out, stderr=err) == 0
    table = out.getvalue().splitlines()
    assert [row.split()[0] for row in table] == ["action", "publish", "check", "run", "validation", "all"]
    assert err.getvalue() == ""
