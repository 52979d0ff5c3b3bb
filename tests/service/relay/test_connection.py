"""The one-shot relay wire (runner.md §7.1): NIP-42, publish waits for OK, verified queries, the 128,000-byte cap.

Against nostr-sdk's LocalRelay (an independent relay implementation) for what a real relay decides
(storage, signature checks, lazy NIP-42), and against the stand-in relay for what only a relay
that misbehaves on cue can show (a withheld OK, a forged event in a query, a refused AUTH).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from eval_runner.nostr import Event, Filter, SecretKey, sign
from eval_runner.service.relay.connection import (
    MAX_MESSAGE_BYTES,
    RelayClient,
    RelayConnection,
    RelayError,
    event_frame,
)
from tests.support.stand_in_relay import (
    StandInRelay,
    frame_text,
    local_relay,
    sized_event,
    stored_filter,
    unused_port_url,
)


def note(secret: SecretKey, text: str, kind: int = 1, tags: list[list[str]] | None = None) -> Event:
    return sign(secret, kind, tags or [], text, 1_700_000_000)


def forged(event: Event) -> Event:
    """Same fields, a signature from another event: the id still matches, the signature does not."""
    other = sign(SecretKey.generate(), 1, [], "other", 1)
    return dataclasses.replace(event, sig=other.sig)


# against nostr-sdk's LocalRelay


async def test_publish_returns_once_the_relay_stored_it_and_query_returns_it_verified() -> None:
    secret = SecretKey.generate()
    async with local_relay() as url:
        client = RelayClient(url, secret, challenge_wait=0.05)
        first, second = note(secret, "first"), note(secret, "second", kind=30)
        await client.publish(first)
        await client.publish(second)
        assert await client.query(stored_filter(first)) == [first]
        by_kind = await client.query(Filter.build(kinds=[30], authors=[secret.public_key().to_hex()]))
        assert by_kind == [second]


async def test_a_bad_signature_gets_ok_false_as_a_typed_refusal() -> None:
    secret = SecretKey.generate()
    async with local_relay() as url:
        client = RelayClient(url, secret, challenge_wait=0.05)
        bad = forged(note(secret, "tampered"))
        with pytest.raises(RelayError) as caught:
            await client.publish(bad)
        assert caught.value.code == "refused"
        assert str(caught.value).startswith("the relay refused 1: invalid")
        assert await client.query(stored_filter(bad)) == []


async def test_nip42_on_a_relay_that_challenges_only_when_asked() -> None:
    """LocalRelay in NIP-42 mode challenges at the first REQ/EVENT and refuses it `auth-required:`;
    the client answers the challenge and sends the refused frame again, once."""
    secret = SecretKey.generate()
    async with local_relay(nip42=True) as url:
        client = RelayClient(url, secret, challenge_wait=0.05)
        event = note(secret, "behind auth")
        await client.publish(event)
        assert await client.query(stored_filter(event)) == [event]


# against the stand-in relay


async def test_publish_waits_for_the_ok_carrying_its_event_id() -> None:
    secret = SecretKey.generate()
    event = note(secret, "hello")
    async with StandInRelay() as relay:
        publishing = asyncio.create_task(RelayClient(relay.url, secret).publish(event))
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        sent = await connection.recv_until("EVENT")
        assert sent[1] == event.to_json()
        # An OK for another event, a notice and an EOSE settle nothing; the verdict is the OK with its id.
        await connection.send(["OK", "f" * 64, True, ""])
        await connection.send(["NOTICE", "not yet"])
        await connection.send(["EOSE", "q"])
        await connection.send(["OK", event.id, False, "blocked: this one"])
        with pytest.raises(RelayError) as caught:
            await asyncio.wait_for(publishing, 5)
        assert (caught.value.code, str(caught.value)) == ("refused", "the relay refused 1: blocked: this one")
        assert relay.seq_of(1, "in", ["AUTH"]) < relay.seq_of(1, "in", ["EVENT"])


async def test_an_unanswered_publish_times_out_and_a_closed_socket_says_so() -> None:
    secret = SecretKey.generate()
    async with StandInRelay(challenge=False) as relay:
        event = note(secret, "into the void")
        publishing = asyncio.create_task(RelayClient(relay.url, secret, bound=0.5, challenge_wait=0.01).publish(event))
        silent = await relay.accept()
        await silent.recv_until("EVENT")
        await silent.send(["OK", "f" * 64, True, ""])
        with pytest.raises(RelayError) as caught:
            await publishing
        assert (caught.value.code, str(caught.value)) == ("timeout", "the relay didn't answer in time")

        closing = asyncio.create_task(RelayClient(relay.url, secret, challenge_wait=0.01).publish(note(secret, "x")))
        connection = await relay.accept()
        await connection.recv_until("EVENT")
        await connection.close()
        with pytest.raises(RelayError) as caught:
            await closing
        assert caught.value.code == "closed"
        assert str(caught.value).startswith("the relay closed the socket")


async def test_a_refused_auth_is_an_error_before_anything_is_sent() -> None:
    secret = SecretKey.generate()
    async with StandInRelay() as relay:
        publishing = asyncio.create_task(RelayClient(relay.url, secret).publish(note(secret, "x")))
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex(), accept=False)
        with pytest.raises(RelayError) as caught:
            await publishing
        assert caught.value.code == "auth_refused"
        assert str(caught.value).startswith("NIP-42 authentication refused")
        assert await connection.recv() is None  # closed without an EVENT


async def test_a_query_keeps_only_verified_matching_events_and_stops_at_eose() -> None:
    secret = SecretKey.generate()
    author = SecretKey.generate()
    wanted = note(author, "good", kind=3184)
    other_kind = note(author, "wrong kind", kind=1)
    async with StandInRelay() as relay:
        filter_ = Filter.build(kinds=[3184], authors=[author.public_key().to_hex()])
        querying = asyncio.create_task(RelayClient(relay.url, secret).query(filter_))
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        req = await connection.recv_until("REQ")
        assert req == ["REQ", "q", filter_.to_json()]
        await connection.deliver(forged(note(author, "forged", kind=3184)), "q")
        await connection.deliver(other_kind, "q")
        await connection.deliver(wanted, "other-subscription")
        await connection.deliver(wanted, "q")
        await connection.deliver(wanted, "q")
        await connection.send(["EOSE", "q"])
        await connection.deliver(note(author, "after EOSE", kind=3184), "q")
        assert await asyncio.wait_for(querying, 5) == [wanted]


async def test_a_closed_query_is_an_error_naming_the_relays_message() -> None:
    secret = SecretKey.generate()
    async with StandInRelay() as relay:
        querying = asyncio.create_task(RelayClient(relay.url, secret).query(Filter.build(kinds=[1])))
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        await connection.recv_until("REQ")
        await connection.send(["CLOSED", "q", "error: too many filters"])
        with pytest.raises(RelayError) as caught:
            await querying
        assert (caught.value.code, str(caught.value)) == (
            "query_closed",
            "the relay closed the query: error: too many filters",
        )


# the 128,000-byte cap


def test_the_event_message_cap_is_128000_bytes_of_the_exact_text() -> None:
    secret = SecretKey.generate()
    at_cap = sized_event(secret, MAX_MESSAGE_BYTES)
    assert len(event_frame(at_cap).encode()) == 128_000
    with pytest.raises(RelayError) as caught:
        event_frame(sized_event(secret, MAX_MESSAGE_BYTES + 1))
    assert caught.value.code == "too_large"
    # Multi-byte characters count as bytes, not characters.
    wide = note(secret, "é" * 64_000)
    assert len(frame_text(wide)) < 128_000 < len(frame_text(wide).encode())
    with pytest.raises(RelayError):
        event_frame(wide)


async def test_an_oversize_event_is_refused_before_any_connection() -> None:
    secret = SecretKey.generate()
    async with StandInRelay() as relay:
        client = RelayClient(relay.url, secret)
        with pytest.raises(RelayError) as caught:
            await client.publish(sized_event(secret, MAX_MESSAGE_BYTES + 1))
        assert caught.value.code == "too_large"
        assert relay.connections == []

        at_cap = sized_event(secret, MAX_MESSAGE_BYTES)
        publishing = asyncio.create_task(client.publish(at_cap))
        connection = await relay.accept()
        await connection.authenticate(secret.public_key().to_hex())
        assert (await connection.recv_until("EVENT"))[1]["id"] == at_cap.id
        await connection.send(["OK", at_cap.id, True, ""])
        await asyncio.wait_for(publishing, 5)


async def test_an_unreachable_relay_is_a_typed_error() -> None:
    with pytest.raises(RelayError) as caught:
        await RelayConnection.open(unused_port_url(), SecretKey.generate())
    assert caught.value.code == "unreachable"
