"""A fleet runner's lease (`service/fleet.py`) over a real PostgreSQL ledger and real signed answers.

A survivor's heartbeat answers a lapsed runner's run `unknown`, to the requester's first execute event,
from the stored result; a runner that finds its own lease lapsed stops (stop and hurry are set), and so does
one whose database stops answering (a stopped server process: three beats missed, not one beat hung). A
ledger call stuck behind a lock fails at the statement timeout instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from eval_runner.contracts.answers import ResultBody, read_answer
from eval_runner.nostr import PublicKey, SecretKey, conversation_key, decrypt
from eval_runner.service.fleet import beat, lease_kept
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.postgres import LeaseLostError, PostgresLedger
from eval_runner.service.requests.reply import RESULT_KIND, Answers
from tests.support.ledger_requests import NOW, dispatch, event, execute
from tests.support.postgres_server import PostgresServer
from tests.support.stand_in_publisher import StandInPublisher


def lapse(url: str, ledger: PostgresLedger) -> None:
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute(
            "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' WHERE holder = %s",
            (ledger.holder,),
        )


@contextlib.contextmanager
def paused_backend(url: str, name: str) -> Iterator[None]:
    """The server process serving the connection named `name` stopped (SIGSTOP) for the block: a database
    that neither answers nor fails, which no statement timeout ends (the server enforces it)."""
    with psycopg.connect(url, autocommit=True) as raw:
        found = raw.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()", (name,)
        ).fetchone()
    assert found is not None
    pid = int(found[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def worker_locked(url: str, worker: str) -> Iterator[None]:
    """Another session holding the per-worker lock every ledger write takes first, for the block."""
    with psycopg.connect(url) as raw, raw.transaction():
        raw.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (worker,))
        yield


async def test_a_survivor_answers_a_lapsed_runners_run_unknown(postgres: PostgresServer, tmp_path: Path) -> None:
    runner, phone = SecretKey.generate(), SecretKey.generate()
    worker, principal = runner.public_key().to_hex(), phone.public_key().to_hex()
    url = postgres.fresh_schema()
    survivor = PostgresLedger.connect(url, tmp_path / "survivor", worker, NOW)
    doomed = PostgresLedger.connect(url, tmp_path / "doomed", worker, NOW)
    publisher = StandInPublisher()
    answers = Answers(runner, publisher)
    try:
        claim = dispatch(doomed, execute("killed"), event("first"), principal)
        doomed.add_alias(claim.key, event("again"))
        await beat(survivor, answers, {})
        assert publisher.events == []
        lapse(url, doomed)
        await beat(survivor, answers, {})
        [answer] = publisher.events
        assert answer.kind == RESULT_KIND
        assert publisher.about(event("first")) == [answer]
        text = decrypt(answer.content, conversation_key(phone, PublicKey.parse(worker)))
        result = read_answer(text)
        assert isinstance(result, ResultBody)
        assert (result.outcome, result.dispatched, result.binding) == ("unknown", True, claim.binding)
        await beat(survivor, answers, {})
        assert len(publisher.events) == 1, "a claim is answered once, by the beat that recovered it"
    finally:
        doomed.close()
        survivor.close()


async def test_a_runner_whose_lease_lapsed_stops(postgres: PostgresServer, tmp_path: Path) -> None:
    runner = SecretKey.generate()
    url = postgres.fresh_schema()
    stop, hurry = asyncio.Event(), asyncio.Event()
    with PostgresLedger.connect(url, tmp_path, runner.public_key().to_hex(), NOW, lease_ms=300) as ledger:
        async with lease_kept(ledger, Answers(runner, StandInPublisher()), {}, stop, hurry):
            assert not stop.is_set()
            lapse(url, ledger)
            await asyncio.wait_for(stop.wait(), 10)
            assert hurry.is_set()


async def test_a_cancel_taken_by_another_runner_stops_the_run_where_it_runs(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    runner, phone = SecretKey.generate(), SecretKey.generate()
    worker, principal = runner.public_key().to_hex(), phone.public_key().to_hex()
    url = postgres.fresh_schema()
    with (
        PostgresLedger.connect(url, tmp_path / "holder", worker, NOW) as holder,
        PostgresLedger.connect(url, tmp_path / "other", worker, NOW) as other,
    ):
        running = dispatch(holder, execute("running"), event(1), principal)
        untouched = dispatch(holder, execute("untouched"), event(2), principal)
        stops = {running.key: asyncio.Event(), untouched.key: asyncio.Event()}
        answers = Answers(runner, StandInPublisher())
        await beat(holder, answers, stops)
        assert not stops[running.key].is_set()
        other.request_cancel(running.key, "changed my mind")
        await beat(other, answers, {})
        await beat(holder, answers, stops)
        assert stops[running.key].is_set()
        assert not stops[untouched.key].is_set()


async def test_a_runner_whose_lease_lapsed_is_told_so_by_type(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with PostgresLedger.connect(url, tmp_path, SecretKey.generate().public_key().to_hex(), NOW) as ledger:
        ledger.heartbeat(NOW)
        lapse(url, ledger)
        with pytest.raises(LeaseLostError):
            ledger.heartbeat(NOW)


async def test_a_runner_whose_database_stops_answering_stops(postgres: PostgresServer, tmp_path: Path) -> None:
    runner = SecretKey.generate()
    name = f"stuck-{uuid.uuid4().hex[:12]}"
    url = f"{postgres.fresh_schema()}&application_name={name}"
    stop, hurry = asyncio.Event(), asyncio.Event()
    with PostgresLedger.connect(url, tmp_path, runner.public_key().to_hex(), NOW, lease_ms=300) as ledger:
        async with lease_kept(ledger, Answers(runner, StandInPublisher()), {}, stop, hurry):
            with paused_backend(url, name):
                await asyncio.wait_for(stop.wait(), 10)
                assert hurry.is_set()


async def test_a_ledger_call_stuck_behind_a_lock_fails_instead_of_hanging(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    worker = SecretKey.generate().public_key().to_hex()
    url = postgres.fresh_schema()
    with (
        PostgresLedger.connect(url, tmp_path, worker, NOW, lease_ms=300) as ledger,
        worker_locked(url, worker),
        pytest.raises(LedgerError),
    ):
        await asyncio.wait_for(asyncio.to_thread(ledger.heartbeat, NOW), 10)
