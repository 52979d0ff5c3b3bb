"""The execution ledger on a real SQLite file: every reservation rule, each phase, results, controls, opening.

The shared builders (bodies, keys, clock, reserve/dispatch, result bodies) are in `tests.support.ledger_requests`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import fingerprint, root_record
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from eval_runner.service.ledger.file import SCHEMA_VERSION
from eval_runner.service.ledger.store import (
    CAPACITY,
    Claim,
    Job,
    Ledger,
    LedgerError,
    Refusal,
    ResultConflictError,
    Retransmission,
    key_name,
    key_of,
    ledger_path,
)
from tests.support.ledger_backends import LedgerBackend
from tests.support.ledger_requests import (
    DEADLINE,
    MAILBOX,
    NOW,
    OTHER_WORKER,
    RETAIN,
    STRANGER,
    TRAINER,
    WORKER,
    cancelled,
    dispatch,
    event,
    execute,
    failed,
    open_ledger,
    published,
    reserve,
    stored_job,
)

HORIZON = NOW + 3_600 + 604_800 + 86_400


def claim_at(ledger: Ledger, key: str) -> Claim:
    found = ledger.lookup(key)
    assert found is not None
    return found


def refused(found: object, code: Code) -> Refusal:
    assert isinstance(found, Refusal), found
    assert found.code == code
    return found


# -- reservation ----------------------------------------------------------------------------------


def test_a_new_claim_is_reserved_with_its_root_and_holds_a_slot(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    body = execute()
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, body, event(1))
        root = root_record(body, WORKER, NOW)
        assert claim.key == key_of(WORKER, TRAINER, "req-1", 1) == f"{WORKER}|{TRAINER}|req-1|1"
        assert claim.key_name == key_name(claim.key) == hashlib.sha256(claim.key.encode()).hexdigest()[:32]
        assert (claim.phase, claim.holds_slot, claim.acknowledged, claim.dispatch_intent) == (
            "reserved",
            True,
            False,
            False,
        )
        assert claim.fingerprint == fingerprint(body)
        assert claim.aliases == (event(1),)
        assert (claim.execute_event, claim.created_at, claim.mailbox) == (event(1), NOW - 5, MAILBOX)
        assert claim.root == root.data
        assert claim.record == root.ref
        assert claim.root_digest == root.digest
        assert claim.outcome is None
        assert claim.result is None
        assert claim.dispatched is False
        assert ledger.active_slots() == 1
        assert ledger.newest_request_created_at() == NOW - 5
        assert ledger.lookup(claim.key) == claim


def test_acknowledge_then_intend_are_durable_phase_changes(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute())
        with pytest.raises(LedgerError):
            ledger.intend(claim.key)
        accepted = ledger.acknowledge(claim.key)
        assert accepted.record.matches(claim.root)
        assert (accepted.controller, accepted.mailbox, accepted.retain_until) == (WORKER, MAILBOX, RETAIN)
        assert accepted.input_digest == execute().input_digest
        assert accepted.lock_digest == claim.lock_digest
        assert ledger.acknowledge(claim.key) == accepted
        intended = ledger.intend(claim.key)
        assert (intended.phase, intended.dispatch_intent, intended.dispatched) == ("intended", True, None)
        assert intended.runnable
        assert intended.answers_dispatched
    assert ledger_backend.execute(tmp_path, "SELECT phase FROM claims") == [("intended",)]


def test_a_root_whose_bytes_changed_is_not_acknowledged(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute())
        ledger_backend.execute(tmp_path, "UPDATE claims SET root = ?", (claim.root + b" ",))
        with pytest.raises(LedgerError) as caught:
            ledger.acknowledge(claim.key)
        assert caught.value.code == Code.IDENTITY_MISMATCH
        assert not claim_at(ledger, claim.key).acknowledged


def test_the_same_key_with_another_body_is_an_idempotency_conflict(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute())
        found = ledger.prepare(execute(note="changed"), event(2), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert refused(found, Code.IDEMPOTENCY_CONFLICT).message == "this request ID was used for a different request"
        assert ledger.lookup(claim.key) == claim
        assert ledger.active_slots() == 1


def test_a_retransmission_adds_an_alias_and_later_gets_the_stored_result(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    body = execute()
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, body, event(1))
        again = ledger.prepare(body, event(2), TRAINER, NOW + 10, MAILBOX, created_at=NOW + 9)
        assert isinstance(again, Retransmission)
        assert again.claim.aliases == (event(1), event(2))
        assert again.claim.result is None
        assert ledger.add_alias(claim.key, event(2)).aliases == (event(1), event(2))
        assert ledger.active_slots() == 1
        stored = ledger.finish(claim.key, "failed", failed(claim))
        # After the deadline too: a known fingerprint is never stale, and never reserves again.
        late = ledger.prepare(body, event(3), TRAINER, DEADLINE + 100, MAILBOX, created_at=DEADLINE + 99)
        assert isinstance(late, Retransmission)
        assert late.claim.result == stored
        assert late.claim.aliases == (event(1), event(2), event(3))
        assert late.claim.execute_event == event(1)
        assert ledger.newest_request_created_at() == NOW - 5


def test_retain_until_beyond_the_horizon_is_limit_exceeded(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        found = ledger.prepare(execute(retain_until=HORIZON + 1), event(1), TRAINER, NOW, MAILBOX, created_at=NOW)
        refused(found, Code.LIMIT_EXCEEDED)
        assert ledger.claims() == ()
        reserve(ledger, execute(retain_until=HORIZON))


def test_a_passed_deadline_is_stale(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        refused(ledger.prepare(execute(), event(1), TRAINER, DEADLINE, MAILBOX, created_at=NOW), Code.STALE)
        assert ledger.prepare(execute(), event(1), TRAINER, DEADLINE - 1, MAILBOX, created_at=NOW) == ledger.lookup(
            ledger.key(TRAINER, "req-1", 1)
        )


def test_a_revoked_target_is_refused(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    body = execute()
    with ledger_backend.open(tmp_path) as ledger:
        ledger.revoke_target(body.target.artifact.digest)
        refused(ledger.prepare(body, event(1), TRAINER, NOW, MAILBOX, created_at=NOW), Code.REVOKED)


def test_sixteen_slots_then_busy_then_free_after_finish(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claims = [dispatch(ledger, execute(f"req-{n}"), event(n)) for n in range(CAPACITY)]
        assert ledger.active_slots() == CAPACITY
        extra = execute("req-extra")
        busy = refused(ledger.prepare(extra, event("x"), TRAINER, NOW, MAILBOX, created_at=NOW), Code.BUSY)
        assert "16" in busy.message
        # The earlier rules still come first when every slot is taken.
        refused(ledger.prepare(extra, event("x"), TRAINER, DEADLINE, MAILBOX, created_at=NOW), Code.STALE)
        late = execute("req-far", retain_until=HORIZON + 1)
        refused(ledger.prepare(late, event("y"), TRAINER, NOW, MAILBOX, created_at=NOW), Code.LIMIT_EXCEEDED)
        ledger.finish(claims[3].key, "failed", failed(claims[3]))
        assert ledger.active_slots() == CAPACITY - 1
        assert not claim_at(ledger, claims[3].key).holds_slot
        reserve(ledger, extra, event("x"))
        assert ledger.active_slots() == CAPACITY


def test_a_second_attempt_needs_a_settled_first_attempt_here(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        second = execute(attempt=2)
        found = ledger.prepare(second, event(2), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert "not on this runner" in refused(found, Code.CANNOT_ENFORCE).message
        first = dispatch(ledger, execute(attempt=1), event(1))
        refused(ledger.prepare(second, event(2), TRAINER, NOW, MAILBOX, created_at=NOW), Code.CANNOT_ENFORCE)
        # Another trainer's first attempt does not count for this one.
        refused(ledger.prepare(second, event(2), STRANGER, NOW, MAILBOX, created_at=NOW), Code.CANNOT_ENFORCE)
        ledger.finish(first.key, "failed", failed(first))
        claim = reserve(ledger, second, event(2))
        assert (claim.attempt, claim.phase) == (2, "reserved")


def test_a_second_attempt_after_an_unknown_first_attempt_cannot_be_enforced(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        dispatch(ledger, execute(attempt=1), event(1))
    with ledger_backend.open(tmp_path) as ledger:
        [first] = ledger.claims()
        assert first.outcome == "unknown"
        found = ledger.prepare(execute(attempt=2), event(2), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert "reconcile" in refused(found, Code.CANNOT_ENFORCE).message


def test_a_second_attempt_after_conflicting_results_cannot_be_enforced(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        first = dispatch(ledger, execute(attempt=1), event(1))
        ledger.finish(first.key, "failed", failed(first))
        with pytest.raises(ResultConflictError):
            ledger.finish(first.key, "cancelled", cancelled(first))
        refused(
            ledger.prepare(execute(attempt=2), event(2), TRAINER, NOW, MAILBOX, created_at=NOW), Code.CANNOT_ENFORCE
        )


def test_a_second_attempt_after_a_tombstoned_first_is_content_unavailable(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        first = dispatch(ledger, execute(attempt=1), event(1))
        ledger.finish(first.key, "failed", failed(first))
        assert ledger.sweep(RETAIN) == 1
        swept = ledger.lookup(first.key)
        assert swept is not None
        assert (swept.phase, swept.tombstone, swept.outcome, swept.result) == ("tombstone", True, "failed", None)
        found = ledger.prepare(execute(attempt=2), event(2), TRAINER, NOW, MAILBOX, created_at=NOW)
        refused(found, Code.CONTENT_UNAVAILABLE)
        with pytest.raises(LedgerError) as caught:
            ledger.status(first.key)
        assert caught.value.code == Code.CONTENT_UNAVAILABLE


def test_rollback_removes_only_an_unacknowledged_reservation(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        reserved = reserve(ledger, execute("a"))
        accepted = reserve(ledger, execute("b"))
        ledger.acknowledge(accepted.key)
        assert ledger.rollback(reserved.key)
        assert not ledger.rollback(accepted.key)
        assert ledger.lookup(reserved.key) is None
        assert ledger.lookup(accepted.key) is not None
        assert ledger.active_slots() == 1
        assert not ledger.rollback(reserved.key)


# -- progress, cancel, finish -------------------------------------------------------------------


def test_progress_seq_is_strictly_one_more_each_time(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute())
        with pytest.raises(LedgerError):
            ledger.record_progress(claim.key, 0, "queued")
        ledger.acknowledge(claim.key)
        ledger.intend(claim.key)
        assert ledger.record_progress(claim.key, 0, "queued").phase == "running"
        for wrong in (0, 2, -1):
            with pytest.raises(LedgerError) as caught:
                ledger.record_progress(claim.key, wrong, "running")
            assert caught.value.code == Code.MALFORMED
        with pytest.raises(LedgerError):
            ledger.record_progress(claim.key, 1, "finished")
        notes = ledger.record_progress(claim.key, 1, "running").progress
        assert [(note.seq, note.status) for note in notes] == [(0, "queued"), (1, "running")]
        ledger.finish(claim.key, "failed", failed(claim))
        with pytest.raises(LedgerError):
            ledger.record_progress(claim.key, 2, "running")


def test_finish_stores_one_result_and_an_equal_repeat_returns_it(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        payload = published(claim)
        stored = ledger.finish(claim.key, "completed", payload, now=NOW + 60)
        assert stored == canonical(json.loads(payload)).decode()
        settled = ledger.lookup(claim.key)
        assert settled is not None
        assert (settled.phase, settled.outcome, settled.dispatched, settled.holds_slot) == (
            "terminal",
            "completed",
            True,
            False,
        )
        assert (settled.observed, settled.settled_at, settled.result_digest) == (
            True,
            NOW + 60,
            digest_bytes(stored.encode()),
        )
        assert ledger.active_slots() == 0
        # The same result written differently is the same result.
        same = json.dumps(json.loads(payload), sort_keys=False, indent=4)
        assert ledger.finish(claim.key, "completed", same) == stored
        with pytest.raises(ResultConflictError) as caught:
            ledger.finish(claim.key, "completed", published(claim, result_id="0" * 64))
        assert caught.value.code == Code.CONFLICT
        after = ledger.lookup(claim.key)
        assert after is not None
        assert (after.outcome, after.result) == ("completed", stored)
        assert after.conflict
        assert after.winner is None
        assert len(after.conflicts) == 2
        assert after.conflicts[0] == settled.result_digest


def test_finish_refuses_what_is_not_this_claims_result(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute("a"))
        other = dispatch(ledger, execute("b"))
        refusal = json.dumps(ResultBody.refused(claim.binding, Code.BUSY, "no").to_json())
        for outcome, payload in (
            ("failed", failed(other)),
            ("cancelled", failed(claim)),
            ("refused", refusal),
            ("failed", "{not json"),
            ("finished", failed(claim)),
        ):
            with pytest.raises(LedgerError) as caught:
                ledger.finish(claim.key, outcome, payload)
            assert caught.value.code == Code.MALFORMED
        with pytest.raises(LedgerError) as missing:
            ledger.finish(key_of(WORKER, TRAINER, "nobody", 1), "failed", failed(claim))
        assert missing.value.code == Code.UNAVAILABLE
        assert claim_at(ledger, claim.key).outcome is None
        assert ledger.active_slots() == 2


def test_a_cancel_settles_a_claim_only_before_dispatch(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        live = dispatch(ledger, execute("live"))
        answer = ledger.request_cancel(live.key, "the person tapped Stop")
        assert (answer.confirmed, answer.outcome, answer.dispatched) == (False, None, True)
        after = ledger.lookup(live.key)
        assert after is not None
        assert (after.cancel_requested, after.cancel_reason, after.holds_slot, after.runnable) == (
            True,
            "the person tapped Stop",
            True,
            True,
        )
        early = reserve(ledger, execute("early"))
        ledger.acknowledge(early.key)
        answer = ledger.request_cancel(early.key, "stop", now=NOW + 1)
        assert (answer.outcome, answer.dispatched) == ("cancelled", False)
        with pytest.raises(LedgerError):
            ledger.intend(early.key)
        settled = ledger.lookup(early.key)
        assert settled is not None
        assert settled.result is not None
        result = ResultBody.parse(read(settled.result))
        assert (result.outcome, result.dispatched, result.has_code) == ("cancelled", False, False)
        assert ledger.active_slots() == 1


def test_a_cancel_after_the_result_changes_nothing_but_the_flag(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        stored = ledger.finish(claim.key, "failed", failed(claim))
        answer = ledger.request_cancel(claim.key, "too late")
        assert (answer.outcome, answer.dispatched) == ("failed", True)
        assert claim_at(ledger, claim.key).result == stored


# -- controls -------------------------------------------------------------------------------------


def test_a_control_finds_its_claim_by_request_attempt_run_event_and_signer(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute(), event(1))
        ledger.add_alias(claim.key, event(2))
        assert ledger.find_for_control("req-1", 1, "run-req-1", event(1), TRAINER) == ledger.lookup(claim.key)
        assert ledger.find_for_control("req-1", 1, "run-req-1", event(2), TRAINER) is None
        assert ledger.find_for_control("req-1", 2, "run-req-1", event(1), TRAINER) is None
        assert ledger.find_for_control("req-1", 1, "other-run", event(1), TRAINER) is None
        assert ledger.find_for_control("req-1", 1, "run-req-1", event(1), STRANGER) is None
        ledger.add_controller(STRANGER)
        assert ledger.find_for_control("req-1", 1, "run-req-1", event(1), STRANGER) is not None


def test_status_and_replay_answer_from_the_claim(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        status = ledger.status(claim.key)
        assert (status.state, status.record, status.outcome, status.dispatched) == (
            "intended",
            claim.record,
            None,
            True,
        )
        ledger.finish(claim.key, "failed", failed(claim))
        assert (ledger.status(claim.key).state, ledger.status(claim.key).outcome) == ("terminal", "failed")
        replay = ledger.replay(claim.key, None, 256)
        assert [(record.seq, record.digest) for record in replay.records] == [(0, claim.root_digest)]
        assert (replay.next_seq, replay.complete, replay.gap, replay.code) == (1, True, False, None)
        later = ledger.replay(claim.key, 0, 1)
        assert (later.records, later.next_seq, later.complete) == ((), 0, True)
        with pytest.raises(LedgerError):
            ledger.replay(claim.key, None, 0)


# -- opening, recovery, other runner keys ---------------------------------------------------------


def test_open_recovers_each_kind_of_claim_as_section_6_says(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        reserved = reserve(ledger, execute("reserved"))
        accepted = reserve(ledger, execute("accepted"))
        ledger.acknowledge(accepted.key)
        intended = dispatch(ledger, execute("intended"))
        running = dispatch(ledger, execute("running"))
        ledger.record_progress(running.key, 0, "queued")
        done = dispatch(ledger, execute("done"))
        stored = ledger.finish(done.key, "failed", failed(done))
        ledger.save_job(Job(running.key, "run", TRAINER, '{"id": "x"}', "running"))
    with ledger_backend.open(tmp_path, now=NOW + 500) as ledger:
        assert ledger.lookup(reserved.key) is None
        assert ledger.lookup(accepted.key) is None
        for claim in (intended, running):
            found = ledger.lookup(claim.key)
            assert found is not None
            assert (found.outcome, found.phase, found.dispatched, found.holds_slot) == (
                "unknown",
                "unknown",
                True,
                False,
            )
            assert not found.runnable
            assert found.settled_at == NOW + 500
            assert found.result == canonical(ResultBody.unknown(claim.binding, claim.record).to_json()).decode()
            assert "code" not in json.loads(found.result)
        assert claim_at(ledger, done.key).result == stored
        assert ledger.active_slots() == 0
        assert stored_job(ledger, running.key).status == "unknown"
    if not ledger_backend.shared:
        assert stat.S_IMODE(os.stat(ledger_path(tmp_path)).st_mode) == 0o600


def test_another_runner_keys_claims_are_never_mixed_with_ours(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    body = execute()
    ours = ledger_backend.open(tmp_path, WORKER)
    theirs = ledger_backend.open(tmp_path, OTHER_WORKER)
    try:
        for n in range(CAPACITY):
            dispatch(theirs, execute(f"theirs-{n}"))
        mine = dispatch(ours, body)
        their_claim = theirs.lookup(key_of(OTHER_WORKER, TRAINER, "theirs-0", 1))
        assert their_claim is not None
        assert ours.lookup(their_claim.key) is None
        assert ours.active_slots() == 1
        assert theirs.active_slots() == CAPACITY
        assert [claim.key for claim in ours.claims()] == [mine.key]
        assert ours.find_for_control("theirs-0", 1, "run-theirs-0", their_claim.execute_event, TRAINER) is None
        with pytest.raises(LedgerError):
            ours.finish(their_claim.key, "failed", failed(their_claim))
        # The same request to the other key is its own claim there.
        refused(theirs.prepare(body, event(9), TRAINER, NOW, MAILBOX, created_at=NOW), Code.BUSY)
    finally:
        theirs.close()
        ours.close()
    with ledger_backend.open(tmp_path, WORKER) as reopened:
        assert claim_at(reopened, mine.key).outcome == "unknown"
    phases = ledger_backend.execute(tmp_path, "SELECT DISTINCT phase FROM claims WHERE worker = ?", (OTHER_WORKER,))
    assert phases == [("intended",)]


def test_one_process_per_runner_key_holds_the_ledger(tmp_path: Path) -> None:
    first = open_ledger(tmp_path)
    with pytest.raises(LedgerError, match="another process"):
        open_ledger(tmp_path)
    open_ledger(tmp_path, OTHER_WORKER).close()
    first.close()
    first.close()
    with pytest.raises(LedgerError, match="closed"):
        first.lookup("x")
    open_ledger(tmp_path).close()


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path: Path) -> None:
    ledger_path(tmp_path).write_bytes(b"this is not a database, only words" * 200)
    with pytest.raises(LedgerError):
        open_ledger(tmp_path)
    newer = tmp_path / "newer"
    open_ledger(newer).close()
    with sqlite3.connect(ledger_path(newer)) as raw:
        raw.execute("PRAGMA user_version=99")
    with pytest.raises(LedgerError, match="schema 99"):
        open_ledger(newer)
    with pytest.raises(LedgerError) as caught:
        Ledger.open(ledger_path(tmp_path / "other"), "not-a-key", NOW)
    assert caught.value.code == Code.MALFORMED


def test_the_schema_is_made_once_and_reopening_keeps_everything(tmp_path: Path) -> None:
    with open_ledger(tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        stored = ledger.finish(claim.key, "failed", failed(claim))
    for _ in range(2):
        with open_ledger(tmp_path) as ledger:
            assert claim_at(ledger, claim.key).result == stored
    with sqlite3.connect(ledger_path(tmp_path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
