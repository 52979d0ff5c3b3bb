"""A run's job record (runner.md §5 `job.json`) as rows of `jobs`, beside its claim in the same ledger.

A job belongs to a dispatched claim of the ledger's key with the same principal; its action, principal
and request never change, and once its status leaves `running` it stays. The rules are the same in
every backend; only the insert-or-replace statement is the backend's (`LedgerStorage.SAVE_JOB`).
"""

from __future__ import annotations

from pathlib import Path

from eval_runner.contracts.errors import Code
from eval_runner.service.ledger.backend import LedgerStorage
from eval_runner.service.ledger.claims import (
    JOB_ACTIONS,
    JOB_STATUSES,
    Job,
    LedgerError,
    job_from_row,
    json_text,
    key_name,
)


class JobRecords(LedgerStorage):
    """The job half of a ledger: save, read and find runs' job records."""

    def save_job(self, job: Job) -> Job:
        """Insert or update a run's job record (runner.md §5 `job.json`), committed before returning."""
        if job.action not in JOB_ACTIONS or job.status not in JOB_STATUSES:
            raise LedgerError(f"a job is {JOB_ACTIONS} and {JOB_STATUSES}", Code.MALFORMED)
        with self._write() as db:
            claim = self._require(db, job.key)
            if not claim.dispatch_intent:
                raise LedgerError(f"job {job.key_name}'s claim was never dispatched")
            if job.principal != claim.principal:
                raise LedgerError(f"job {job.key_name} names another principal than its claim", Code.MALFORMED)
            row = db.execute("SELECT * FROM jobs WHERE key = ? AND worker = ?", (job.key, self.worker)).fetchone()
            if row is not None:
                stored = job_from_row(row)
                if (stored.action, stored.principal, stored.request) != (job.action, job.principal, job.request):
                    raise LedgerError(
                        f"job {job.key_name}'s action, principal and request never change", Code.MALFORMED
                    )
                if stored.status != "running" and job.status != stored.status:
                    raise LedgerError(f"job {job.key_name} already ended {stored.status}", Code.CONFLICT)
            db.execute(
                self.SAVE_JOB,
                (
                    job.key,
                    self.worker,
                    job.action,
                    job.principal,
                    job.request,
                    job.status,
                    job.check,
                    job.validates,
                    job.results,
                    None if job.report is None else json_text(job.report.to_json()),
                    None if job.report is None else job.report.digest,
                    None if job.sealed is None else json_text(job.sealed.to_json()),
                    None if job.published is None else json_text(job.published.to_json()),
                    job.publishing,
                ),
            )
            return job

    def job(self, key: str) -> Job | None:
        with self._read() as db:
            row = db.execute("SELECT * FROM jobs WHERE key = ? AND worker = ?", (key, self.worker)).fetchone()
            return None if row is None else job_from_row(row)

    def jobs(self) -> tuple[Job, ...]:
        with self._read() as db:
            rows = db.execute("SELECT * FROM jobs WHERE worker = ? ORDER BY rowid", (self.worker,)).fetchall()
            return tuple(job_from_row(row) for row in rows)

    def find_completed_run(self, principal: str, report_digest: str) -> Job | None:
        """The completed run job of `principal` whose report has this digest (publish admission, §9.5 step 5)."""
        with self._read() as db:
            row = db.execute(
                "SELECT * FROM jobs WHERE worker = ? AND principal = ? AND report_digest = ? "
                "AND action = 'run' AND status = 'completed' ORDER BY rowid LIMIT 1",
                (self.worker, principal, report_digest),
            ).fetchone()
            return None if row is None else job_from_row(row)

    def results_base(self, key: str) -> Path:
        """`<state>/jobs/<key_name>/results`, made owner-only: where the engine makes a run's results directory."""
        base = self.results_root / "jobs" / key_name(key) / "results"
        try:
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise LedgerError(f"the results directory of {key_name(key)} could not be made: {error}") from error
        return base
