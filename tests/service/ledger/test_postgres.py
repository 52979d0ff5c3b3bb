"""The PostgreSQL ledger as a fleet shares it: several holders of one runner key on one real database.

The rules every backend keeps are the contract suite's (`ledger_backend`); here is what only a shared
database has: a request claimed once whichever runner gets it, slots counted fleet-wide, a lapsed holder's
claims recovered by a survivor (dispatched ones `unknown`, never runnable again), a live holder's left
alone, a runner told when its own lease lapsed, an event a dead runner took handled by the next, and a
newer schema refused.
"""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from eval_runner.service.ledger.claims import CAPACITY, Claim, LedgerError, Refusal, Retransmission
from eval_runner.service.ledger.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresLedger
from tests.support.ledger_requests import MAILBOX, NOW, TRAINER, WORKER, dispatch, event, execute, reserve
from tests.support.postgres_server import PostgresServer


def connect(url: str, state: Path, *, lease_ms: int = 30_000) -> PostgresLedger:
    return PostgresLedger.connect(url, state, WORKER, NOW, lease_ms=lease_ms)


def lapse(url: str, ledger: PostgresLedger) -> None:
    """Make `ledger`'s lease lapse now, as if its runner had stopped heart-beating (it was SIGKILLed)."""
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(
            "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE holder = %s",
            (ledger.holder,),
        )


def test_runners_racing_for_one_request_claim_it_exactly_once(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    runners = [connect(url, tmp_path / f"r{n}") for n in range(3)]
    body = execute("raced")
    answers: list[Claim | Retransmission | Refusal] = []
    start = threading.Barrier(len(runners) * 4)

    def offer(ledger: PostgresLedger, copy: int) -> None:
        start.wait()
        answers.append(ledger.prepare(body, event(copy), TRAINER, NOW, MAILBOX, created_at=NOW))

    try:
        threads = [
            threading.Thread(target=offer, args=(ledger, n * 4 + copy))
            for n, ledger in enumerate(runners)
            for copy in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        claimed = [answer for answer in answers if isinstance(answer, Claim)]
        assert len(claimed) == 1
        assert sum(isinstance(answer, Retransmission) for answer in answers) == len(answers) - 1
        stored = runners[1].lookup(claimed[0].key)
        assert stored is not None
        assert sorted(stored.aliases) == sorted(event(n) for n in range(12))
    finally:
        for ledger in runners:
            ledger.close()


def test_the_claim_slots_are_counted_across_the_fleet(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as first, connect(url, tmp_path / "b") as second:
        for n in range(CAPACITY):
            reserve(first if n % 2 else second, execute(f"slot-{n}"))
        found = second.prepare(execute("one-more"), event("more"), TRAINER, NOW, MAILBOX, created_at=NOW)
        assert isinstance(found, Refusal)
        assert found.code == "busy"
        assert first.active_slots() == second.active_slots() == CAPACITY


def test_a_lapsed_runners_claims_are_recovered_by_a_survivor_and_a_live_ones_are_not(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    survivor = connect(url, tmp_path / "survivor")
    doomed = connect(url, tmp_path / "doomed")
    try:
        running = dispatch(doomed, execute("running-there"))
        waiting = reserve(doomed, execute("reserved-there"))
        ours = dispatch(survivor, execute("running-here"))
        assert survivor.heartbeat(NOW + 5) == ()
        assert doomed.lookup(running.key) == survivor.lookup(running.key)
        lapse(url, doomed)
        settled = survivor.heartbeat(NOW + 10)
        assert [claim.key for claim in settled] == [running.key]
        found = survivor.lookup(running.key)
        assert found is not None
        assert (found.outcome, found.phase, found.dispatched, found.holds_slot, found.settled_at) == (
            "unknown",
            "unknown",
            True,
            False,
            NOW + 10,
        )
        assert not found.runnable
        assert found.result == settled[0].result
        assert survivor.lookup(waiting.key) is None
        mine = survivor.lookup(ours.key)
        assert mine is not None
        assert mine.runnable
        assert survivor.heartbeat(NOW + 11) == ()
        with pytest.raises(LedgerError, match="lease lapsed"):
            doomed.heartbeat(NOW + 12)
    finally:
        doomed.close()
        survivor.close()


def test_a_runner_that_closes_leaves_its_open_claims_to_the_next(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as first:
        running = dispatch(first, execute())
        with connect(url, tmp_path / "b") as second:
            assert second.lookup(running.key) == first.lookup(running.key)
    with connect(url, tmp_path / "c") as third:
        found = third.lookup(running.key)
        assert found is not None
        assert found.outcome == "unknown"


def test_each_delivered_event_is_taken_by_one_runner(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as first, connect(url, tmp_path / "b") as second:
        assert first.shared
        assert first.take_event(event(1))
        assert not second.take_event(event(1))
        assert not first.take_event(event(1))
        assert second.take_event(event(2))


def test_an_event_taken_by_a_runner_that_died_is_taken_over_by_the_next(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as dead, connect(url, tmp_path / "b") as survivor:
        assert dead.take_event(event(1))
        assert not survivor.take_event(event(1))  # its taker is alive: it may be claiming it now
        lapse(url, dead)  # SIGKILLed before its claim committed
        with connect(url, tmp_path / "restarted") as restarted:
            assert restarted.take_event(event(1))
            assert not survivor.take_event(event(1))
            assert not dead.take_event(event(1))
        assert survivor.take_event(event(1))  # the restarted runner closed (its lease is gone) in turn


def test_a_schema_3_database_is_brought_to_4_and_its_taken_events_stay_taken(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("CREATE TABLE ledger_schema (version INTEGER NOT NULL)")
        for version in (1, 2, 3):
            raw.execute(MIGRATIONS[version])
            raw.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (version,))
        raw.execute("INSERT INTO taken (worker, event_id) VALUES (%s, %s)", (WORKER, event(1)))
    with connect(url, tmp_path) as ledger:
        assert not ledger.take_event(event(1))  # its taker (an older runner, perhaps alive) is unknown
        assert ledger.take_event(event(2))
    with psycopg.connect(url, autocommit=True) as raw:
        assert raw.execute("SELECT MAX(version) FROM ledger_schema").fetchone() == (SCHEMA_VERSION,)
        rows = raw.execute("SELECT event_id, holder FROM taken ORDER BY taken_at").fetchall()
    assert rows == [(event(1), None), (event(2), ledger.holder)]


def test_a_database_with_a_newer_schema_is_refused(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    connect(url, tmp_path).close()
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("INSERT INTO ledger_schema (version) VALUES (99)")
    with pytest.raises(LedgerError, match="schema 99"):
        connect(url, tmp_path)


def test_a_broken_connection_is_made_again(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path) as ledger:
        claim = dispatch(ledger, execute())
        with psycopg.connect(url, autocommit=True) as raw:
            raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND datname = current_database() AND usename = current_user"
            )
        with pytest.raises(LedgerError):
            ledger.lookup(claim.key)
        assert ledger.lookup(claim.key) is not None
