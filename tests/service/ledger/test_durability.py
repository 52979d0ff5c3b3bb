"""The ledger across real process boundaries and under concurrent writers (runner.md §6, §21.1 item 5, §21.4).

Children are real Python processes that open the same SQLite file and are SIGKILLed (by the parent, or by
themselves the instant a call returns), so nothing they did is flushed by a clean exit. The SQLite
equivalents of the reference's ledger-write tests: a committed write survives the process, concurrent
writers never lose or tear each other's changes, and a write that fails leaves nothing and can be retried.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.errors import Code
from eval_runner.contracts.strict_json import canonical
from eval_runner.service.ledger.file import connect, release
from eval_runner.service.ledger.store import CAPACITY, Claim, Ledger, LedgerError, Refusal, Retransmission, ledger_path
from tests.support.ledger_requests import (
    MAILBOX,
    NOW,
    OTHER_WORKER,
    TRAINER,
    WORKER,
    dispatch,
    event,
    execute,
    failed,
    open_ledger,
)
from tests.support.paths import REPO

ROOT = REPO


def spawn(state: Path, worker: str, mode: str, *extra: str) -> subprocess.Popen[str]:
    code = "import sys; from tests.support.ledger_children import child; child(sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(state), worker, mode, *extra],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def killed(process: subprocess.Popen[str]) -> None:
    assert process.wait(timeout=60) == -signal.SIGKILL


def test_a_run_interrupted_by_a_kill_is_unknown_on_reopen_and_never_runs_again(tmp_path: Path) -> None:
    process = spawn(tmp_path, WORKER, "intend-and-wait")
    assert process.stdout is not None
    key = process.stdout.readline().strip()
    # While the child holds the ledger, nobody else may open it for this key.
    with pytest.raises(LedgerError, match="another process"):
        open_ledger(tmp_path)
    process.kill()
    killed(process)
    with open_ledger(tmp_path, now=NOW + 30) as ledger:
        claim = ledger.lookup(key)
        assert claim is not None
        assert (claim.outcome, claim.phase, claim.dispatched, claim.holds_slot) == ("unknown", "unknown", True, False)
        assert not claim.runnable
        assert not any(found.runnable for found in ledger.claims())
        assert ledger.active_slots() == 0
        expected = canonical(ResultBody.unknown(claim.binding, claim.record).to_json()).decode()
        assert claim.result == expected
        # A retransmission is answered with the stored unknown result, and nothing is reserved again.
        again = ledger.prepare(execute(), event("retry"), TRAINER, NOW + 30, MAILBOX, created_at=NOW + 29)
        assert isinstance(again, Retransmission)
        assert again.claim.result == expected
        assert again.claim.outcome == "unknown"
        assert ledger.active_slots() == 0
        retry = ledger.prepare(execute(attempt=2), event("a2"), TRAINER, NOW + 30, MAILBOX, created_at=NOW)
        assert isinstance(retry, Refusal)
        assert retry.code == Code.CANNOT_ENFORCE
        before = ledger.lookup(key)
    with open_ledger(tmp_path, now=NOW + 90) as ledger:
        assert ledger.lookup(key) == before


def test_a_claim_committed_just_before_a_kill_is_there_on_reopen(tmp_path: Path) -> None:
    killed(spawn(tmp_path, WORKER, "intend-and-die"))
    with open_ledger(tmp_path) as ledger:
        [claim] = ledger.claims()
        assert claim.acknowledged
        assert claim.dispatch_intent
        assert claim.root
        assert claim.record.matches(claim.root)
        assert claim.outcome == "unknown"


def test_a_result_committed_just_before_a_kill_is_there_on_reopen(tmp_path: Path) -> None:
    killed(spawn(tmp_path, WORKER, "finish-and-die"))
    with open_ledger(tmp_path) as ledger:
        [claim] = ledger.claims()
        assert (claim.outcome, claim.phase, claim.holds_slot) == ("failed", "terminal", False)
        assert [note.seq for note in claim.progress] == [0]
        assert claim.result == canonical(json.loads(failed(claim))).decode()


def test_two_runner_keys_writing_one_file_at_once_lose_nothing(tmp_path: Path) -> None:
    count = 25
    children = [spawn(tmp_path, worker, "many", str(count)) for worker in (WORKER, OTHER_WORKER)]
    for process in children:
        assert process.wait(timeout=120) == 0
    for worker in (WORKER, OTHER_WORKER):
        with open_ledger(tmp_path, worker) as ledger:
            claims = ledger.claims()
            assert len(claims) == count
            assert all(claim.outcome == "failed" and len(claim.progress) == 1 for claim in claims)
            assert {claim.worker for claim in claims} == {worker}
    with sqlite3.connect(ledger_path(tmp_path)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_threads_preparing_at_once_never_exceed_sixteen_slots(tmp_path: Path) -> None:
    threads = 40
    start = threading.Barrier(threads)
    outcomes: list[Claim | Refusal | Retransmission | Exception] = []
    lock = threading.Lock()

    def one(n: int, ledger: Ledger) -> None:
        start.wait()
        try:
            found: Claim | Refusal | Retransmission | Exception = ledger.prepare(
                execute(f"req-{n}"), event(n), TRAINER, NOW, MAILBOX, created_at=NOW
            )
            if isinstance(found, Claim):
                ledger.acknowledge(found.key)
                ledger.intend(found.key)
        except Exception as error:
            found = error
        with lock:
            outcomes.append(found)

    with open_ledger(tmp_path) as ledger:
        workers = [threading.Thread(target=one, args=(n, ledger)) for n in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        reserved = [found for found in outcomes if isinstance(found, Claim)]
        busy = [found for found in outcomes if isinstance(found, Refusal) and found.code == Code.BUSY]
        assert (len(reserved), len(busy), len(outcomes)) == (CAPACITY, threads - CAPACITY, threads)
        assert ledger.active_slots() == CAPACITY
        assert all(claim.dispatch_intent for claim in ledger.claims())
    with sqlite3.connect(ledger_path(tmp_path)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("SELECT COUNT(*) FROM claims").fetchone() == (CAPACITY,)


def test_concurrent_writes_to_different_claims_are_all_kept(tmp_path: Path) -> None:
    """The snapshot race the reference's generation counter guards against cannot drop a write here."""
    notes = 12
    with open_ledger(tmp_path) as ledger:
        claims = [dispatch(ledger, execute(f"req-{n}"), event(n)) for n in range(CAPACITY)]
        start = threading.Barrier(len(claims))
        errors: list[Exception] = []

        def work(claim: Claim) -> None:
            start.wait()
            try:
                for seq in range(notes):
                    ledger.record_progress(claim.key, seq, "running")
                ledger.finish(claim.key, "failed", failed(claim, f"run {claim.request} failed"))
            except Exception as error:
                errors.append(error)

        workers = [threading.Thread(target=work, args=(claim,)) for claim in claims]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        assert errors == []
    with open_ledger(tmp_path) as ledger:
        for claim in ledger.claims():
            assert [note.seq for note in claim.progress] == list(range(notes))
            assert claim.outcome == "failed"
            assert f"run {claim.request} failed" in (claim.result or "")
        assert ledger.active_slots() == 0


def test_a_write_that_fails_leaves_nothing_and_can_be_retried(tmp_path: Path) -> None:
    body = execute()
    ledger = Ledger.open(ledger_path(tmp_path), WORKER, NOW, busy_timeout_ms=50)
    try:
        blocker = sqlite3.connect(ledger_path(tmp_path), isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(LedgerError) as caught:
            ledger.prepare(body, event(1), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert caught.value.code == Code.UNAVAILABLE
        blocker.execute("ROLLBACK")
        blocker.close()
        assert ledger.claims() == ()
        claim = ledger.prepare(body, event(1), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert isinstance(claim, Claim)
        assert claim.aliases == (event(1),)
        assert ledger.active_slots() == 1
    finally:
        ledger.close()


def _open_at_once(path: str, worker: str, start: Any, answers: Any) -> None:
    start.wait()
    try:
        db, lock_fd = connect(Path(path), worker, 10_000)
        release(db, lock_fd)
        answers.put("ok")
    except LedgerError as error:
        answers.put(str(error))


def test_runners_opening_a_new_ledger_file_at_once_all_get_it(tmp_path: Path) -> None:
    """Switching a fresh file to WAL can be refused at once (no busy wait) while another process opens it."""
    context = multiprocessing.get_context("fork")
    failures: list[str] = []
    for trial in range(200):
        path = str(tmp_path / f"{trial}.sqlite")
        start, answers = context.Barrier(6), context.Queue()
        children = [
            context.Process(target=_open_at_once, args=(path, (f"{n:x}" * 64)[:64], start, answers)) for n in range(6)
        ]
        for process in children:
            process.start()
        for process in children:
            process.join(timeout=60)
        failures += [answer for answer in (answers.get(timeout=10) for _ in children) if answer != "ok"]
    assert failures == []
