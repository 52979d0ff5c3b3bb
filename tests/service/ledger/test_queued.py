"""The fleet's queue and day counts in a real PostgreSQL ledger, shared by several holders of one key.

A queued run is taken by exactly one runner however many race for it, oldest first, and the taker
becomes its holder; a runner whose lease lapsed takes none; a runner that dies with runs in the queue
leaves them to the others (recovery answers its running claims `unknown` and leaves the queued ones
queued); the brake's counts are exact when runners count at once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg

from eval_runner.service.ledger.claims import Job
from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.ledger.queued import Queued, Taken
from tests.support.ledger_requests import NOW, TRAINER, WORKER, dispatch, execute
from tests.support.postgres_server import PostgresServer


def connect(url: str, state: Path) -> PostgresLedger:
    return PostgresLedger.connect(url, state, WORKER, NOW, lease_ms=30_000)


def enqueue(ledger: PostgresLedger, request: str) -> str:
    claim = dispatch(ledger, execute(request))
    job = Job(key=claim.key, action="run", principal=TRAINER, request="{}", status="running")
    noted = ledger.enqueue(job, Queued(claim.key, '{"id": "x"}', 1_000, 42, '{"plan": 1}'))
    assert [(note.seq, note.status) for note in noted.progress] == [(0, "queued")]
    return claim.key


def test_each_queued_run_is_taken_once_oldest_first_and_its_taker_holds_it(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    runners = [connect(url, tmp_path / f"r{n}") for n in range(3)]
    try:
        keys = [enqueue(runners[0], f"queued-{n}") for n in range(12)]
        assert runners[1].queue_depth() == 12
        taken: list[tuple[int, Taken]] = []
        start = threading.Barrier(6)

        def take(n: int) -> None:
            start.wait()
            while (found := runners[n % 3].take()) is not None:
                taken.append((n % 3, found))

        threads = [threading.Thread(target=take, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(found.claim.key for _, found in taken) == sorted(keys)
        for runner, found in taken:
            assert found.queued.arrival_ms == 1_000
            assert found.queued.bytes_in == 42
            with psycopg.connect(url, autocommit=True) as raw:
                holder = raw.execute("SELECT holder FROM claims WHERE key = %s", (found.claim.key,)).fetchone()
            assert holder == (runners[runner].holder,)
        assert runners[2].queue_depth() == 0
        assert runners[0].take() is None
    finally:
        for ledger in runners:
            ledger.close()


def test_a_dead_runners_queued_runs_stay_queued_and_its_running_ones_become_unknown(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    survivor = connect(url, tmp_path / "survivor")
    dying = connect(url, tmp_path / "dying")
    try:
        running = dispatch(dying, execute("running"))
        waiting = enqueue(dying, "waiting")
        with psycopg.connect(url, autocommit=True) as raw:
            raw.execute(
                "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE holder = %s",
                (dying.holder,),
            )
        settled = survivor.heartbeat(NOW)
        assert [claim.key for claim in settled] == [running.key]
        found = survivor.take()
        assert found is not None
        assert found.claim.key == waiting
        assert found.claim.outcome is None
        assert found.claim.dispatch_intent
        assert survivor.heartbeat(NOW) == ()  # now held by a live runner: not recovered
    finally:
        survivor.close()
        dying.close()


def test_a_runner_whose_lease_lapsed_takes_no_queued_run(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "survivor") as survivor, connect(url, tmp_path / "lapsed") as lapsed:
        waiting = enqueue(survivor, "waiting")
        with psycopg.connect(url, autocommit=True) as raw:
            raw.execute(
                "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE holder = %s",
                (lapsed.holder,),
            )
        assert lapsed.take() is None
        assert lapsed.take(waiting) is None
        assert survivor.queue_depth() == 1
        found = survivor.take()
        assert found is not None
        assert found.claim.key == waiting
        with psycopg.connect(url, autocommit=True) as raw:
            holder = raw.execute("SELECT holder FROM claims WHERE key = %s", (waiting,)).fetchone()
        assert holder == (survivor.holder,)


def test_only_the_named_run_is_taken_for_a_cancel(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as ledger:
        first = enqueue(ledger, "first")
        second = enqueue(ledger, "second")
        found = ledger.take(second)
        assert found is not None
        assert found.claim.key == second
        assert ledger.take(second) is None
        again = ledger.take()
        assert again is not None
        assert again.claim.key == first


def test_the_brake_counts_are_exact_when_runners_count_at_once(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    runners = [connect(url, tmp_path / f"r{n}") for n in range(3)]
    admitted: list[bool] = []
    start = threading.Barrier(9)

    def count(n: int) -> None:
        start.wait()
        for _ in range(4):
            admitted.append(runners[n % 3].count(TRAINER, 2, run=True, day=7, runs_brake=10, turns_brake=None))

    try:
        threads = [threading.Thread(target=count, args=(n,)) for n in range(9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert admitted.count(True) == 10
        runs, turns = runners[1].day_counts(7)
        assert (dict(runs), turns) == ({TRAINER: 10}, 20)
        assert not runners[0].count("e" * 64, 1, run=True, day=7, runs_brake=None, turns_brake=20)
        runners[2].uncount(TRAINER, 2, run=True, day=7)
        assert runners[0].count("e" * 64, 1, run=False, day=7, runs_brake=0, turns_brake=20)
        runs, turns = runners[0].day_counts(7)
        assert (dict(runs), turns) == ({TRAINER: 9}, 19)
        assert runners[0].day_counts(8) == ({}, 0)
    finally:
        for ledger in runners:
            ledger.close()


def test_usage_lines_of_every_runner_are_read_in_order(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with connect(url, tmp_path / "a") as first, connect(url, tmp_path / "b") as second:
        first.keep_usage("2026-12-01", '{"n": 1}')
        second.keep_usage("2026-12-02", '{"n": 2}')
        first.keep_usage("2026-12-01", '{"n": 3}')
        assert second.usage_lines() == ('{"n": 1}', '{"n": 3}', '{"n": 2}')
        assert first.usage_lines("2026-12-02") == ('{"n": 2}',)
