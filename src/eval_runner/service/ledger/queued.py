"""The fleet's queue of admitted runs, in the PostgreSQL ledger several runners share.

With one SQLite ledger an admitted run waits for a suite slot of the process that admitted it (its
semaphore). In a fleet it waits in `queue` instead, and whichever runner has a free slot takes it
(`SELECT … FOR UPDATE SKIP LOCKED`, without the key's writer lock, so takers never wait on one another
nor on the writers): "queued, not refused" then holds across the fleet, and a runner that dies leaves its
queued runs to the others instead of having them answered `unknown`.

A queued row keeps what the taker needs to run the request as its admitter would have: the signed execute
event (every runner of a fleet holds the key, so each can open it again), when it arrived and how large
it was (the usage record's clock and size), and `plan`, what admission decided that a second admission
might decide differently (the tool's release, coder's defaults as read then, the quota ticket). Enqueueing
records the run's job and its `queued` progress note in the same transaction, so the taker goes on from
`seq` 1. Taking the row makes the taker the claim's holder (its lease then covers the run: from here a
dead holder's run is answered `unknown`, never rerun), so only a runner whose own lease is live takes one.
Recovery (`_recover`) leaves queued claims alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from eval_runner.service.ledger.claims import Claim, Job, LedgerError
from eval_runner.service.ledger.store import Ledger

#: The schema the queue, the fleet's day counts and its usage lines add (migration 3).
QUEUE_SCHEMA: Final = """
CREATE TABLE queue (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    key TEXT PRIMARY KEY REFERENCES claims (key) ON DELETE CASCADE,
    worker TEXT NOT NULL,
    request TEXT NOT NULL,
    arrival_ms BIGINT NOT NULL,
    bytes_in BIGINT NOT NULL,
    plan TEXT NOT NULL
);
CREATE INDEX queue_order ON queue (worker, rowid);
CREATE TABLE day_runs (
    worker TEXT NOT NULL,
    day BIGINT NOT NULL,
    trainer TEXT NOT NULL,
    runs BIGINT NOT NULL CHECK (runs >= 0),
    PRIMARY KEY (worker, day, trainer)
);
CREATE TABLE day_turns (
    worker TEXT NOT NULL,
    day BIGINT NOT NULL,
    turns BIGINT NOT NULL CHECK (turns >= 0),
    PRIMARY KEY (worker, day)
);
CREATE TABLE usage_lines (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    worker TEXT NOT NULL,
    day TEXT NOT NULL,
    line TEXT NOT NULL
);
CREATE INDEX usage_lines_day ON usage_lines (worker, day, rowid);
"""
#: The condition (on `claims`) that keeps a queued claim out of recovery: nobody runs it yet.
NOT_QUEUED: Final = " AND NOT EXISTS (SELECT 1 FROM queue WHERE queue.key = claims.key)"
#: The condition a taker meets (parameters: its worker and holder): it holds a live lease.
_LIVE_TAKER: Final = (
    "EXISTS (SELECT 1 FROM leases WHERE leases.worker = ? AND leases.holder = ? "
    "AND leases.expires_at > clock_timestamp())"
)


@dataclass(frozen=True, slots=True)
class Queued:
    """An admitted run as it waits: the signed execute event (JSON text), its arrival (unix ms) and size,
    and `plan`, admission's decisions a second admission might not repeat (JSON text)."""

    key: str
    request: str
    arrival_ms: int
    bytes_in: int
    plan: str


@dataclass(frozen=True, slots=True)
class Taken:
    """A queued run this runner took: what was queued, and its claim as it stands (now held here)."""

    queued: Queued
    claim: Claim


class QueueRecords(Ledger):
    """Enqueue and take runs (over a backend shared by several processes: `postgres.PostgresTables`)."""

    holder: str

    def enqueue(self, job: Job, queued: Queued) -> Claim:
        """Record the run's job, its `queued` note (seq 0) and its place in the queue, in one transaction;
        returns the claim with the note. The claim must be dispatched, unsettled and without progress."""
        with self._write() as db:
            claim = self._require(db, queued.key)
            if not claim.dispatch_intent or claim.outcome is not None or claim.progress:
                raise LedgerError(f"claim {claim.key_name} is not a dispatched claim waiting to start")
            self.save_job(job)
            self.record_progress(queued.key, 0, "queued")
            db.execute(
                "INSERT INTO queue (key, worker, request, arrival_ms, bytes_in, plan) VALUES (?, ?, ?, ?, ?, ?)",
                (queued.key, self.worker, queued.request, queued.arrival_ms, queued.bytes_in, queued.plan),
            )
            return self._require(db, queued.key)

    def take(self, key: str | None = None) -> Taken | None:
        """The oldest queued run no other runner is taking (or the one of `key`), now held by this runner;
        None when there is none, or when this runner's own lease lapsed (a survivor would answer the run
        `unknown` while it runs here: the runner learns at its next heartbeat that it must stop). Takers
        skip each other's rows (`SKIP LOCKED`) rather than wait."""
        only = "" if key is None else " AND key = ?"
        with self._unlocked_write() as db:
            row = db.execute(
                "SELECT key, request, arrival_ms, bytes_in, plan FROM queue WHERE worker = ?"  # noqa: S608
                f"{only} AND {_LIVE_TAKER} ORDER BY rowid LIMIT 1 FOR UPDATE SKIP LOCKED",
                (self.worker, *(() if key is None else (key,)), self.worker, self.holder),
            ).fetchone()
            if row is None:
                return None
            queued = Queued(row["key"], row["request"], int(row["arrival_ms"]), int(row["bytes_in"]), row["plan"])
            db.execute("DELETE FROM queue WHERE key = ?", (queued.key,))
            self._held(db, queued.key)
            claim = self._require(db, queued.key)
        return Taken(queued, claim)

    def queue_depth(self) -> int:
        """Runs of this key waiting in the fleet's queue."""
        with self._read() as db:
            return int(db.execute("SELECT COUNT(*) FROM queue WHERE worker = ?", (self.worker,)).fetchone()[0])
