"""A publish's progress on its run's job (`jobs.publishing`, schema version 2): kept across a reopen, and a
ledger file written before the column existed is brought up to it with its jobs intact."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from eval_runner.service.ledger.claims import Job
from eval_runner.service.ledger.file import MIGRATIONS, SCHEMA_VERSION
from eval_runner.service.ledger.store import ledger_path
from tests.support.ledger_requests import TRAINER, WORKER, dispatch, execute, open_ledger, stored_job

SIGNED = '{"id":"' + "ab" * 32 + '","kind":3189}'


def test_the_signed_result_is_kept_on_the_job_and_survives_a_reopen(tmp_path: Path) -> None:
    with open_ledger(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        job = Job(claim.key, "run", TRAINER, '{"id": "x"}', "completed")
        ledger.save_job(job)
        assert stored_job(ledger, claim.key).publishing is None
        ledger.save_job(dataclasses.replace(job, publishing=SIGNED))
    with open_ledger(tmp_path) as ledger:
        assert stored_job(ledger, claim.key).publishing == SIGNED


def test_a_ledger_from_before_the_publishing_column_is_migrated_with_its_jobs(tmp_path: Path) -> None:
    path = ledger_path(tmp_path)
    with sqlite3.connect(path) as raw:
        raw.executescript(MIGRATIONS[1])
        raw.execute("PRAGMA user_version=1")
        raw.execute(
            "INSERT INTO claims (key, worker, principal, request, attempt, run, fingerprint, execute_event, "
            "created_at, deadline, retain_until, input_digest, lock_digest, mailbox, controller, record, root, "
            "root_digest, phase, dispatch_intent, outcome, result, holds_slot) VALUES ('k', ?, ?, 'r', 1, 'r', "
            "'f', 'e', 0, 0, 0, 'i', 'l', 'm', 'c', '{}', x'00', 'd', 'terminal', 1, 'completed', '{}', 0)",
            (WORKER, TRAINER),
        )
        raw.execute(
            "INSERT INTO jobs (key, worker, action, principal, request, status) "
            "VALUES ('k', ?, 'run', ?, '{}', 'completed')",
            (WORKER, TRAINER),
        )
    with open_ledger(tmp_path) as ledger:
        found = [(job.key, job.status, job.publishing) for job in ledger.jobs()]
    assert found == [("k", "completed", None)]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        columns = [row[1] for row in raw.execute("PRAGMA table_info(jobs)")]
    assert columns[-1] == "publishing"
