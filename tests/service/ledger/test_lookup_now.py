"""`Ledger.lookup_now`: the pipeline's lookup on the event loop, which must never wait behind a write.

It answers as `lookup` does while the ledger is free, and says at once that it did not look while another
thread holds the ledger (a write holds it through its fsync); then the pipeline looks in a thread instead.
A shared (PostgreSQL) ledger never looks on the loop: every lookup there is a network round trip.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from eval_runner.service.ledger.claims import Claim
from tests.support.ledger_backends import LedgerBackend
from tests.support.ledger_requests import TRAINER, execute, reserve


def now_or_never(ledger_backend: LedgerBackend, found: Claim | None) -> tuple[bool, Claim | None]:
    """What `lookup_now` answers for a ledger free to look: the lookup, or for a shared one, that it did not."""
    return (False, None) if ledger_backend.shared else (True, found)


def test_a_free_ledger_answers_as_lookup_does(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute("req-now"))
        assert ledger.lookup_now(claim.key) == now_or_never(ledger_backend, ledger.lookup(claim.key))
        assert ledger.lookup_now(ledger.key(TRAINER, "req-none", 1)) == now_or_never(ledger_backend, None)


def test_a_ledger_held_by_another_thread_is_not_waited_for(tmp_path: Path, ledger_backend: LedgerBackend) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute("req-held"))
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with ledger._mutex:  # as a write holds it, through its commit and fsync
                holding.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(10)
            started = time.monotonic()
            assert ledger.lookup_now(claim.key) == (False, None)
            assert time.monotonic() - started < 1, "it did not wait for the holder"
        finally:
            release.set()
            holder.join(10)
        assert ledger.lookup_now(claim.key) == now_or_never(ledger_backend, ledger.lookup(claim.key))


def test_the_loop_thread_may_look_while_it_holds_the_ledger_itself(
    tmp_path: Path, ledger_backend: LedgerBackend
) -> None:
    with ledger_backend.open(tmp_path) as ledger:
        claim = reserve(ledger, execute("req-mine"))
        with ledger._mutex:  # re-entrant: the holder's own lookups go ahead
            assert ledger.lookup_now(claim.key) == now_or_never(ledger_backend, ledger.lookup(claim.key))
