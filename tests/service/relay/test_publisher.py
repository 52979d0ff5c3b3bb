"""The answer writer: one warm connection, pipelined EVENTs, OKs matched by id, and a connection that heals.

Against LocalRelay for the real thing (many publishes in flight on one socket, NIP-42 when asked),
and against the stand-in relay for what it takes a relay misbehaving on cue to show: OKs out of
order, a socket dropped before its OK, a socket gone silent.
"""

from __future__ import annotations

import asyncio

import pytest

from eval_runner.nostr import Event, Filter, SecretKey, sign
from eval_runner.service.relay.connection import MAX_MESSAGE_BYTES, RelayClient, RelayError
from eval_runner.service.relay.publisher import Publisher
from tests.support.captured_logs import LogLines
from tests.support.stand_in_relay import BOUND, StandInRelay, local_relay, sized_event, unused_port_url


def note(secret: SecretKey, text: str) -> Event:
    return sign(secret, 1, [], text, 1_700_000_000)


async def test_many_publishes_share_one_connection_against_a_real_relay() -> None:
    secret = SecretKey.generate()
    events = [note(secret, f"answer {n}") for n in range(80)]
    async with local_relay() as url, Publisher(url, secret, challenge_wait=0.05) as writer:
        await asyncio.wait_for(asyncio.gather(*(writer.publish(event) for event in events)), BOUND)
        await writer.publish(events[0])  # the same event again: the relay says duplicate, still OK
        assert writer.connections == 1
        stored = await RelayClient(url, secret, challenge_wait=0.05).query(Filter.build(ids=[e.id for e in events]))
        assert {event.id for event in stored} == {event.id for event in events}


async def test_a_relay_that_wants_nip42_only_when_asked() -> None:
    secret = SecretKey.generate()
    events = [note(secret, f"behind auth {n}") for n in range(3)]
    async with local_relay(nip42=True) as url, Publisher(url, secret, challenge_wait=0.05) as writer:
        await asyncio.wait_for(asyncio.gather(*(writer.publish(event) for event in events)), BOUND)
        stored = await RelayClient(url, secret, challenge_wait=0.05).query(Filter.build(ids=[e.id for e in events]))
        assert len(stored) == 3


async def test_oks_are_matched_to_publishes_by_event_id_not_by_order() -> None:
    secret = SecretKey.generate()
    first, second = note(secret, "first"), note(secret, "second")
    async with StandInRelay() as relay, Publisher(relay.url, secret) as writer:
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        publishing_first = asyncio.create_task(writer.publish(first))
        sent_first = await connection.recv_until("EVENT")
        publishing_second = asyncio.create_task(writer.publish(second))
        sent_second = await connection.recv_until("EVENT")
        assert [sent_first[1]["id"], sent_second[1]["id"]] == [first.id, second.id]
        await connection.send(["OK", second.id, True, ""])
        await connection.send(["OK", first.id, False, "blocked: not this one"])
        await asyncio.wait_for(publishing_second, BOUND)
        with pytest.raises(RelayError) as caught:
            await asyncio.wait_for(publishing_first, BOUND)
        assert (caught.value.code, str(caught.value)) == ("refused", "the relay refused 1: blocked: not this one")
        assert writer.connections == 1  # a refusal is an answer, not a broken connection


async def test_a_publish_whose_socket_drops_before_its_ok_is_sent_again_on_the_next(logs: LogLines) -> None:
    secret = SecretKey.generate()
    event = note(secret, "through the gap")
    async with StandInRelay() as relay, Publisher(relay.url, secret) as writer:
        dropped = await relay.accept()
        await dropped.authenticate(secret.public_key().to_hex())
        publishing = asyncio.create_task(writer.publish(event))
        assert (await dropped.recv_until("EVENT"))[1]["id"] == event.id
        await dropped.close()
        await logs.wait_for("relay writer: the relay closed the socket")
        fresh = await relay.accept()
        await fresh.authenticate(secret.public_key().to_hex())
        assert (await fresh.recv_until("EVENT"))[1]["id"] == event.id
        await fresh.send(["OK", event.id, True, "duplicate: already have it"])
        await asyncio.wait_for(publishing, BOUND)
        assert writer.connections == 2


async def test_a_silent_socket_is_noticed_by_its_probe_and_the_publish_moves_on(logs: LogLines) -> None:
    secret = SecretKey.generate()
    event = note(secret, "not into the void")
    async with StandInRelay() as relay, Publisher(relay.url, secret, probe=0.2) as writer:
        silent = await relay.accept()
        await silent.authenticate(secret.public_key().to_hex())
        publishing = asyncio.create_task(writer.publish(event))
        await silent.recv_until("EVENT")
        probe = await silent.recv_until("REQ")
        assert probe[1] == "alive-1"
        assert probe[2] == {"ids": ["0" * 64], "limit": 0}
        line = await logs.wait_for("relay writer:")
        assert line == "relay writer: the relay stopped answering: a liveness probe had no reply in 0.2 s; reconnecting"
        fresh = await relay.accept()
        fresh.answer_probes = True
        await fresh.authenticate(secret.public_key().to_hex())
        await fresh.recv_until("EVENT")
        await fresh.send(["OK", event.id, True, ""])
        await asyncio.wait_for(publishing, BOUND)
        await asyncio.wait_for(silent.closed.wait(), BOUND)


async def test_an_unanswered_publish_times_out_and_the_connection_serves_the_next() -> None:
    secret = SecretKey.generate()
    lost, next_one = note(secret, "no OK for this"), note(secret, "this one is answered")
    async with StandInRelay() as relay, Publisher(relay.url, secret, bound=0.3) as writer:
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        with pytest.raises(RelayError) as caught:
            await writer.publish(lost)
        assert (caught.value.code, str(caught.value)) == ("timeout", "the relay didn't answer in time")
        publishing = asyncio.create_task(writer.publish(next_one))
        await connection.recv_until("EVENT", None)  # the unanswered one
        sent = await connection.recv_until("EVENT")
        assert sent[1]["id"] == next_one.id
        await connection.send(["OK", lost.id, True, ""])  # a late OK for a publish that gave up: ignored
        await connection.send(["OK", next_one.id, True, ""])
        await asyncio.wait_for(publishing, BOUND)
        assert writer.connections == 1


async def test_an_oversize_event_never_leaves() -> None:
    secret = SecretKey.generate()
    async with StandInRelay() as relay, Publisher(relay.url, secret) as writer:
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        with pytest.raises(RelayError) as caught:
            await writer.publish(sized_event(secret, MAX_MESSAGE_BYTES + 1))
        assert caught.value.code == "too_large"
        at_cap = sized_event(secret, MAX_MESSAGE_BYTES)
        publishing = asyncio.create_task(writer.publish(at_cap))
        sent = await connection.recv_until("EVENT")
        assert sent[1]["id"] == at_cap.id  # the first EVENT the relay saw is the one at the cap
        await connection.send(["OK", at_cap.id, True, ""])
        await asyncio.wait_for(publishing, BOUND)


async def test_close_fails_what_is_waiting_and_refuses_what_comes_after() -> None:
    secret = SecretKey.generate()
    async with StandInRelay() as relay:
        writer = Publisher(relay.url, secret)
        writer.start()
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        publishing = asyncio.create_task(writer.publish(note(secret, "pending")))
        await connection.recv_until("EVENT")
        await writer.close()
        for attempt in (publishing, writer.publish(note(secret, "after"))):
            with pytest.raises(RelayError) as caught:
                await asyncio.wait_for(attempt, BOUND)
            assert (caught.value.code, str(caught.value)) == ("closed", "the publisher is closed")
        await asyncio.wait_for(connection.closed.wait(), BOUND)


async def test_an_unreachable_relay_fails_the_publish_within_its_bound(logs: LogLines) -> None:
    secret = SecretKey.generate()
    async with Publisher(unused_port_url(), secret, bound=0.5) as writer:
        with pytest.raises(RelayError) as caught:
            await writer.publish(note(secret, "nowhere to go"))
        assert caught.value.code == "timeout"
        line = await logs.wait_for("relay writer:")
        assert line.startswith("relay writer: cannot reach the relay: ")
        assert line.endswith("; reconnecting in 1 s")
