"""Random sequences of ledger operations, restarts included, keep the ledger's invariants.

After every step: the slots held equal the claims holding one and never exceed 16; a settled claim holds
no slot; once a claim has an outcome and a result they never change; a claim that was dispatched never
disappears; and right after a restart nothing is runnable. `prepare` is checked against a small model of
its rules (conflict, retransmission, stale, busy).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import fingerprint
from eval_runner.service.ledger.store import CAPACITY, Claim, Ledger, LedgerError, Refusal, Retransmission
from tests.support.ledger_backends import LedgerBackend
from tests.support.ledger_requests import (
    DEADLINE,
    MAILBOX,
    NOW,
    STRANGER,
    TRAINER,
    cancelled,
    event,
    execute,
    failed,
    published,
)

PICK = st.integers(min_value=0, max_value=10_000)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self, backend: LedgerBackend) -> None:
        super().__init__()
        self.backend = backend
        self.directory = Path(tempfile.mkdtemp(prefix="ledger-machine-"))
        self.ledger: Ledger = backend.open(self.directory)
        self.settled: dict[str, tuple[str, str]] = {}
        self.dispatched: set[str] = set()
        self.events = 0
        self.batches = 0

    def teardown(self) -> None:
        self.ledger.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def pick(self, index: int) -> Claim | None:
        claims = self.ledger.claims()
        return claims[index % len(claims)] if claims else None

    def offer(self, request: str, principal: str, attempt: int, late: bool, note: str) -> None:
        """One `prepare`, checked against the model of its rules."""
        body = execute(request, attempt, note=note)
        existing = self.ledger.lookup(self.ledger.key(principal, body.request, attempt))
        active = self.ledger.active_slots()
        self.events += 1
        now = DEADLINE if late else NOW
        found = self.ledger.prepare(body, event(self.events), principal, now, MAILBOX, created_at=now)
        if existing is not None:
            if existing.fingerprint == fingerprint(body):
                assert isinstance(found, Retransmission)
                assert found.claim.aliases[-1] == event(self.events)
            else:
                assert isinstance(found, Refusal)
                assert found.code == Code.IDEMPOTENCY_CONFLICT
        elif late:
            assert isinstance(found, Refusal)
            assert found.code == Code.STALE
        elif attempt == 1:
            if active >= CAPACITY:
                assert isinstance(found, Refusal)
                assert found.code == Code.BUSY
            else:
                assert isinstance(found, Claim)
                assert found.phase == "reserved"
        else:
            assert isinstance(found, Claim | Refusal)

    @rule(
        request=st.integers(min_value=0, max_value=5),
        principal=st.sampled_from([TRAINER, STRANGER]),
        attempt=st.integers(min_value=1, max_value=2),
        late=st.integers(min_value=0, max_value=5).map(lambda n: n == 5),
        note=st.sampled_from(["a", "b"]),
    )
    def prepare(self, request: int, principal: str, attempt: int, late: bool, note: str) -> None:
        self.offer(f"r{request}", principal, attempt, late, note)

    @rule(count=st.integers(min_value=1, max_value=20), dispatch=st.booleans())
    def prepare_many(self, count: int, dispatch: bool) -> None:
        """Fresh first attempts, enough to fill every slot; optionally taken through to dispatch intent."""
        for _ in range(count):
            self.batches += 1
            self.offer(f"batch-{self.batches}", TRAINER, 1, False, "a")
            found = self.ledger.lookup(self.ledger.key(TRAINER, f"batch-{self.batches}", 1))
            if dispatch and found is not None:
                self.ledger.acknowledge(found.key)
                self.ledger.intend(found.key)

    @rule(index=PICK, same=st.booleans(), late=st.booleans())
    def resend(self, index: int, same: bool, late: bool) -> None:
        """The body of a claim again: a retransmission (even after the deadline) or a changed body."""
        claim = self.pick(index)
        if claim is None:
            return
        note = "a" if claim.fingerprint == fingerprint(execute(claim.request, claim.attempt, note="a")) else "b"
        other = "b" if note == "a" else "a"
        self.offer(claim.request, claim.principal, claim.attempt, late, note if same else other)

    @rule(index=PICK)
    def acknowledge(self, index: int) -> None:
        claim = self.pick(index)
        if claim is not None:
            try:
                self.ledger.acknowledge(claim.key)
            except LedgerError:
                assert claim.outcome is not None

    @rule(index=PICK)
    def intend(self, index: int) -> None:
        claim = self.pick(index)
        if claim is not None:
            try:
                self.ledger.intend(claim.key)
            except LedgerError:
                assert not claim.acknowledged or claim.outcome is not None or claim.cancel_requested

    @rule(index=PICK)
    def progress(self, index: int) -> None:
        claim = self.pick(index)
        if claim is not None:
            try:
                self.ledger.record_progress(claim.key, len(claim.progress), "running")
            except LedgerError:
                assert not claim.runnable

    @rule(index=PICK, outcome=st.sampled_from(["failed", "cancelled", "completed"]))
    def finish(self, index: int, outcome: str) -> None:
        claim = self.pick(index)
        if claim is None:
            return
        payload = {"failed": failed, "cancelled": cancelled, "completed": published}[outcome](claim)
        try:
            stored = self.ledger.finish(claim.key, outcome, payload)
        except LedgerError:
            assert claim.result is not None
            return
        assert claim.result in (None, stored)

    @rule(index=PICK)
    def cancel(self, index: int) -> None:
        claim = self.pick(index)
        if claim is not None:
            self.ledger.request_cancel(claim.key, "stop")

    @rule(index=PICK)
    def rollback(self, index: int) -> None:
        claim = self.pick(index)
        if claim is not None:
            gone = self.ledger.rollback(claim.key)
            assert gone == (not claim.acknowledged and not claim.dispatch_intent and claim.outcome is None)

    @precondition(lambda self: self.events > 0)
    @rule()
    def restart(self) -> None:
        self.ledger.close()
        self.ledger = self.backend.open(self.directory, now=NOW + 1)
        claims = self.ledger.claims()
        assert not any(claim.runnable for claim in claims)
        assert all(claim.dispatch_intent or claim.outcome is not None for claim in claims)

    @invariant()
    def slots_and_settled_claims_hold(self) -> None:
        claims = {claim.key: claim for claim in self.ledger.claims()}
        held = sum(claim.holds_slot for claim in claims.values())
        assert self.ledger.active_slots() == held <= CAPACITY
        for claim in claims.values():
            assert not (claim.holds_slot and claim.outcome is not None)
            assert (claim.outcome is None) == (claim.result is None)
            if claim.outcome is not None:
                self.settled.setdefault(claim.key, (claim.outcome, claim.result or ""))
            if claim.dispatch_intent:
                self.dispatched.add(claim.key)
        for key, (outcome, result) in self.settled.items():
            assert (claims[key].outcome, claims[key].result) == (outcome, result)
        assert self.dispatched <= set(claims)


def test_ledger_operations_keep_the_invariants(ledger_backend: LedgerBackend) -> None:
    class OnThisBackend(LedgerMachine):
        def __init__(self) -> None:
            super().__init__(ledger_backend)

    run_state_machine_as_test(
        OnThisBackend,
        # PostgreSQL makes a schema per example and reconnects per restart: fewer examples, same rules.
        settings=settings(max_examples=15 if ledger_backend.shared else 30, stateful_step_count=40, deadline=None),
    )
