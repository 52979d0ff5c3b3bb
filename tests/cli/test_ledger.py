"""`eval-runner ledger export | import` through real subprocesses: a runner's SQLite state into PostgreSQL.

Every row arrives and reads back as the same record; the open claims are recovered by the first runner
that connects (dispatched: `unknown`; never dispatched: gone), as the SQLite ledger does at open; a
second import of the same export changes nothing and fails; a ledger a runner holds is not exported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.ledger.store import Job, Ledger, ledger_path
from tests.support.ledger_requests import (
    NOW,
    OTHER_WORKER,
    TRAINER,
    WORKER,
    dispatch,
    event,
    execute,
    failed,
    reserve,
)
from tests.support.postgres_server import PostgresServer


def ledger(*args: str, state: Path, database: str = "", stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state), "EVAL_RUNNER_STATE": str(state)}
    if database:
        env["EVAL_RUNNER_DATABASE"] = database
    return subprocess.run(
        [sys.executable, "-m", "eval_runner.cli", "ledger", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
        check=False,
    )


def test_an_sqlite_state_moves_into_postgresql_whole(postgres: PostgresServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Ledger.open(ledger_path(state), WORKER, NOW) as source:
        done = dispatch(source, execute("done"), event(1))
        source.add_alias(done.key, event(2))
        source.record_progress(done.key, 0, "queued")
        source.save_job(Job(done.key, "run", TRAINER, '{"id": "x"}', "completed", results="/r"))
        source.finish(done.key, "failed", failed(done))
        running = dispatch(source, execute("running"))
        waiting = reserve(source, execute("waiting"))
        source.add_controller("e" * 64)
        source.revoke_target("sha256:" + "0" * 64)
        before = {claim.key: claim for claim in source.claims()}
        jobs = source.jobs()
    with Ledger.open(ledger_path(state), OTHER_WORKER, NOW) as other:
        theirs = dispatch(other, execute("theirs"))

    exported = ledger("export", state=state)
    assert exported.returncode == 0, exported.stderr
    url = postgres.fresh_schema()
    imported = ledger("import", state=state, database=url, stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert "imported 4 claims" in imported.stderr

    with PostgresLedger.connect(url, tmp_path / "fleet", WORKER, NOW + 9) as fleet:
        after = {claim.key: claim for claim in fleet.claims()}
        assert list(after) == [done.key, running.key]
        assert after[done.key] == before[done.key]
        assert fleet.jobs() == jobs
        recovered = after[running.key]
        assert (recovered.outcome, recovered.phase, recovered.settled_at) == ("unknown", "unknown", NOW + 9)
        assert before[running.key].outcome is None
        assert waiting.key in before
        assert fleet.find_for_control("done", 1, "run-done", event(1), "e" * 64) is not None
    with PostgresLedger.connect(url, tmp_path / "fleet", OTHER_WORKER, NOW + 9) as fleet:
        found = fleet.lookup(theirs.key)
        assert found is not None
        assert found.outcome == "unknown"

    again = ledger("import", state=state, database=url, stdin=exported.stdout)
    assert again.returncode == 1
    assert "nothing was imported" in again.stderr
    assert url not in again.stderr + imported.stderr

    held = Ledger.open(ledger_path(state), WORKER, NOW)
    try:
        refused = ledger("export", state=state)
        assert refused.returncode == 1
        assert "a runner has this ledger open" in refused.stderr
    finally:
        held.close()


def test_an_import_that_is_not_an_export_is_refused(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    for text in ("", "not json\n", '{"format": "other"}\n', '{"format": "eval-runner.ledger.v1"}\n{"table": "x"}\n'):
        done = ledger("import", state=tmp_path, database=url, stdin=text)
        assert done.returncode == 1
        assert done.stderr.startswith("eval-runner: ledger import: "), done.stderr
    assert ledger("import", state=tmp_path, stdin="").returncode == 1
