"""A fleet runner's lease (`service/fleet.py`) over a real PostgreSQL ledger and real signed answers.

A survivor's heartbeat answers a lapsed runner's run `unknown`, to the requester's first execute event,
from the stored result; a runner that finds its own lease lapsed stops (stop and hurry are set).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from eval_runner.contracts.answers import ResultBody, read_answer
from eval_runner.nostr import PublicKey, SecretKey, conversation_key, decrypt
from eval_runner.service.fleet import beat, lease_kept
from eval_runner.service.ledger.postgres import PostgresLedger
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
