"""A fleet's usage log: each runner writes the lines it answered into the shared PostgreSQL ledger, and
`eval-runner usage` with `EVAL_RUNNER_DATABASE` reads every runner's (a real database)."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from unittest import mock

from eval_runner.cli.main import main
from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.usage import Record, SharedUsageLog, UsageLog, usage_log_for
from tests.support.ledger_requests import NOW, WORKER
from tests.support.postgres_server import PostgresServer

DAY_ONE = 1_790_812_800_000  # 2026-10-01T00:00:00Z


def record(key: str, day: int, outcome: str, ms: int) -> Record:
    base = Record.arrived(key=key, request="e", bytes_in=10, arrival_ms=DAY_ONE + day * 86_400_000, outcome=outcome)
    return replace(base, action="run", subject="tool", turns=4, total_ms=ms)


def usage(argv: list[str], environ: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, environ, clear=True), redirect_stdout(out), redirect_stderr(err):
        code = main(["usage", *argv])
    return code, out.getvalue(), err.getvalue()


def test_usage_reads_the_lines_every_runner_of_a_fleet_wrote(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    first = PostgresLedger.connect(url, tmp_path / "a", WORKER, NOW)
    second = PostgresLedger.connect(url, tmp_path / "b", WORKER, NOW)
    try:
        logs = [usage_log_for(tmp_path / "a" / "usage", first), usage_log_for(tmp_path / "b" / "usage", second)]
        assert all(isinstance(log, SharedUsageLog) for log in logs)
        logs[0].keep(record("alice", 0, "completed", 100))
        logs[1].keep(record("alice", 1, "completed", 300))
        logs[1].keep(record("bob", 1, "refused", 2))
        for log in logs:
            log.close()
        assert not (tmp_path / "a" / "usage").exists()
        code, out, err = usage([], {"EVAL_RUNNER_DATABASE": url, "HOME": "/nowhere"})
        assert (code, err) == (0, "")
        assert out == (
            "day         jobs  completed  failed  refused  keys  turns  total_p50_ms\n"
            "2026-10-01     1          1       0        0     1      4           100\n"
            "2026-10-02     2          1       0        1     2      4           300\n"
            "all            3          2       0        1     2      8           300\n"
        )
        code, out, _ = usage(["--since", "2026-10-02", "--by", "key"], {"EVAL_RUNNER_DATABASE": url, "HOME": "/x"})
        assert code == 0
        assert [line.split()[0] for line in out.splitlines()[1:]] == ["alice", "bob", "all"]
        # A directory named on the command line is read instead of the database.
        UsageLog(tmp_path / "dir").append(record("carol", 0, "completed", 5))
        code, out, _ = usage(["--dir", str(tmp_path / "dir"), "--by", "key"], {"EVAL_RUNNER_DATABASE": url})
        assert out.splitlines()[1].split()[0] == "carol"
    finally:
        first.close()
        second.close()


def test_a_database_with_no_lines_says_so(postgres: PostgresServer) -> None:
    code, out, _ = usage([], {"EVAL_RUNNER_DATABASE": postgres.fresh_schema(), "HOME": "/nowhere"})
    assert (code, out) == (0, "no usage yet: the ledger database holds no usage lines\n")


def test_a_sqlite_runner_keeps_its_usage_in_files(tmp_path: Path) -> None:
    assert type(usage_log_for(tmp_path / "usage", object())) is UsageLog


def test_a_database_url_that_does_not_read_is_refused_before_any_connection_and_never_shown() -> None:
    code, out, err = usage([], {"EVAL_RUNNER_DATABASE": "postgresql://u:pa@sS3cr@h/db", "HOME": "/nowhere"})
    assert code == 1
    assert "a URL that does not read" in err
    assert "S3cr" not in out + err
