"""Job records in the ledger (runner.md §5 `job.json`): publish admission, identity, endings, recovery."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.errors import Code
from eval_runner.contracts.outputs import PublishOutput
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.service.ledger.store import Job, LedgerError, key_of
from tests.support.ledger_backends import LedgerBackend
from tests.support.ledger_requests import (
    STRANGER,
    TRAINER,
    WORKER,
    dispatch,
    execute,
    reserve,
    stored_job,
)

REQUEST_EVENT = '{"id": "0f", "kind": 25920,   "content": "kept exactly"}'
REPORT = ArtifactRef.of_bytes(b'{"report": 1}', "application/json", "openagents.eval-report.v1")


def test_a_completed_run_job_admits_its_trainers_publish(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        job = ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT, "running", check="c" * 64))
        assert ledger.find_completed_run(TRAINER, REPORT.digest) is None
        results = ledger.results_base(claim.key)
        assert results == tmp_path / "jobs" / claim.key_name / "results"
        assert results.is_dir()
        assert stat.S_IMODE(results.stat().st_mode) == 0o700
        sealed = EventRef("1" * 64, WORKER, 3188)
        done = Job(claim.key, "run", TRAINER, REQUEST_EVENT, "completed", job.check, None, str(results), REPORT, sealed)
        ledger.save_job(done)
        assert ledger.find_completed_run(TRAINER, REPORT.digest) == done
        assert ledger.find_completed_run(STRANGER, REPORT.digest) is None
        assert ledger.find_completed_run(TRAINER, digest_bytes(b"another")) is None
        pointers = PublishOutput(EventRef("2" * 64, WORKER, 3184), EventRef("3" * 64, WORKER, 3189))
        published_job = Job(**{**_fields(done), "published": pointers})
        ledger.save_job(published_job)
    with ledger_backend.open(tmp_path) as ledger:
        assert ledger.job(claim.key) == published_job
        assert stored_job(ledger, claim.key).request == REQUEST_EVENT
        assert ledger.jobs() == (published_job,)


def test_a_job_keeps_its_identity_and_its_ending(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        reserved = reserve(ledger, execute("reserved"))
        with pytest.raises(LedgerError):
            ledger.save_job(Job(reserved.key, "run", TRAINER, REQUEST_EVENT, "running"))
        claim = dispatch(ledger, execute())
        with pytest.raises(LedgerError):
            ledger.save_job(Job(key_of(WORKER, TRAINER, "nobody", 1), "run", TRAINER, REQUEST_EVENT, "running"))
        with pytest.raises(LedgerError):
            ledger.save_job(Job(claim.key, "run", STRANGER, REQUEST_EVENT, "running"))
        with pytest.raises(LedgerError):
            ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT, "paused"))
        ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT, "running"))
        with pytest.raises(LedgerError):
            ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT + " ", "running"))
        ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT, "failed"))
        with pytest.raises(LedgerError) as caught:
            ledger.save_job(Job(claim.key, "run", TRAINER, REQUEST_EVENT, "completed", report=REPORT))
        assert caught.value.code == Code.CONFLICT
        assert stored_job(ledger, claim.key).status == "failed"
        assert ledger.find_completed_run(TRAINER, REPORT.digest) is None


def _fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in Job.__dataclass_fields__}
