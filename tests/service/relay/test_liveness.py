"""The requests subscription never trusts a quiet socket (runner.md §8, §21.2).

These mirror the reference's `tests/liveness.rs` against the stand-in relay: a relay that goes
silent is noticed and rejoined; a relay that answers its probes keeps the connection; the
subscription is renewed on an overlapping connection, and a request carried by both connections
reaches `deliver` once. Where the reference proves "answered" with the runner's refusal event, these
prove it at the listener's boundary: `Deliveries` records every hand-over, without deduping, so a
count of one means the listener itself delivered once. Back-off and catch-up are here too.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from eval_runner.nostr import SecretKey, sign
from eval_runner.service.relay.liveness import (
    RENEWED,
    SUBSCRIBED,
    Backoff,
    Ended,
    Liveness,
    catch_up_since,
    is_probe_id,
    probe_request,
    requests_filter,
    seconds_text,
)
from tests.support.listening import SINCE, listening, subscribe
from tests.support.stand_in_relay import BOUND, StandInRelay, request, unused_port_url

# runner.md §21.2


async def test_a_relay_that_goes_silent_is_noticed_and_rejoined() -> None:
    async with StandInRelay() as relay, listening(relay.url, probe=0.3) as run:
        silent = await relay.accept()
        await silent.authenticate(run.runner)
        jobs = await silent.expect_subscription(run.runner, since=SINCE)
        await run.logs.wait_for(SUBSCRIBED)

        # The relay reads what the runner sends, as a front end does, but nothing comes back.
        probe = await silent.recv()
        assert probe is not None
        assert probe[0] == "REQ"
        assert is_probe_id(probe[1])
        assert probe[1] == "alive-1"
        assert probe[2] == {**jobs, "limit": 0}

        line = await run.logs.wait_for("reconnecting in")
        why = "the relay stopped answering: a liveness probe had no reply in 0.3 s"
        assert line == f"relay: {why}; reconnecting in 1 s"
        assert run.ends == [Ended(subscribed=True, why=why)]
        await asyncio.wait_for(silent.closed.wait(), BOUND)

        run.since[0] = SINCE + 42  # the catch-up `since` is asked for again on the new connection
        rejoined = await subscribe(relay, run, answer_probes=True)
        live = request(run.runner, "after the rejoin")
        await rejoined.deliver(live)
        await run.deliveries.wait_for(live)
        assert run.sleeps == [1]
        assert run.logs.lines.count(SUBSCRIBED) == 2


async def test_a_relay_that_answers_its_probes_keeps_the_connection() -> None:
    async with StandInRelay() as relay, listening(relay.url, probe=0.2) as run:
        connection = await subscribe(relay, run, answer_probes=True)
        await connection.wait_probes_answered(6)  # five full probe periods, every probe answered
        assert run.ends == []
        assert len(relay.connections) == 1
        assert not connection.closed.is_set()
        live = request(run.runner, "still here")
        await connection.deliver(live)
        await run.deliveries.wait_for(live)
        assert run.deliveries.count(live) == 1


async def test_the_subscription_is_renewed_on_an_overlapping_connection() -> None:
    async with StandInRelay() as relay, listening(relay.url, renew=0.4) as run:
        old = await subscribe(relay, run)
        await run.logs.wait_for(SUBSCRIBED)

        # The successor connects and subscribes while the first connection is still open.
        new = await relay.accept()
        await new.authenticate(run.runner)
        await new.expect_subscription(run.runner, since=SINCE, eose=False)
        assert not old.closed.is_set()
        early = request(run.runner, "early, on the successor before its EOSE")
        late = request(run.runner, "late, on the old connection before its CLOSE")
        await new.deliver(early)
        await old.deliver(late)
        await new.send(["EOSE", "jobs"])

        # Only now is the old subscription closed, and the old socket is still read.
        assert await old.recv_until("CLOSE") == ["CLOSE", "jobs"]
        assert relay.seq_of(2, "out", ["EOSE", "jobs"]) < relay.seq_of(1, "in", ["CLOSE", "jobs"])
        await run.logs.wait_for(RENEWED)
        await run.deliveries.wait_for(late, early)

        # One request carried by both connections reaches deliver once; one on the old connection
        # after its CLOSE (the drain) still arrives. Markers sent after it on each connection prove
        # both copies were read before counting.
        both = request(run.runner, "on both")
        draining = request(run.runner, "on the old connection while it drains")
        marker = request(run.runner, "marker on the new connection")
        await old.deliver(both)
        await new.deliver(both)
        await old.deliver(draining)
        await new.deliver(marker)
        await run.deliveries.wait_for(draining, marker)
        assert run.deliveries.count(both) == 1
        assert run.deliveries.count(late) == 1
        assert run.deliveries.count(early) == 1

        # The renewed connection carries the next request as the first did.
        following = request(run.runner, "the next request")
        await new.deliver(following)
        await run.deliveries.wait_for(following)
        assert run.ends == []


# more of runner.md §8


async def test_a_probe_is_answered_by_eose_then_closed_or_by_closed() -> None:
    async with StandInRelay() as relay, listening(relay.url, probe=0.2) as run:
        connection = await subscribe(relay, run)
        first = await connection.recv_until("REQ")
        await connection.send(["EOSE", first[1]])
        assert await connection.recv() == ["CLOSE", first[1]]
        second = await connection.recv_until("REQ")
        assert (first[1], second[1]) == ("alive-1", "alive-2")
        await connection.send(["CLOSED", second[1], "error: probes are not welcome"])  # a refusal is an answer
        third = await connection.recv_until("REQ")
        assert third[1] == "alive-3"
        assert run.ends == []


async def test_a_closed_subscription_ends_the_connection() -> None:
    async with StandInRelay() as relay, listening(relay.url) as run:
        connection = await relay.accept()
        await connection.authenticate(run.runner)
        await connection.expect_subscription(run.runner, eose=False)
        await connection.send(["CLOSED", "jobs", "error: shutting down"])
        line = await run.logs.wait_for("reconnecting in")
        assert line == "relay: the relay closed the subscription: error: shutting down; reconnecting in 1 s"
        assert run.ends == [Ended(False, "the relay closed the subscription: error: shutting down")]


async def test_a_failed_renewal_keeps_the_current_connection_and_retries_a_probe_period_later() -> None:
    async with StandInRelay() as relay, listening(relay.url, probe=0.3, renew=0.2) as run:
        current = await subscribe(relay, run, answer_probes=True)
        refused = await relay.accept()
        await refused.authenticate(run.runner)
        await refused.expect_subscription(run.runner, eose=False)
        await refused.send(["CLOSED", "jobs", "error: full"])
        line = await run.logs.wait_for("renewing the subscription failed")
        assert line == (
            "relay: renewing the subscription failed: the relay closed the jobs subscription: error: full; "
            "keeping the current connection"
        )
        await asyncio.wait_for(refused.closed.wait(), BOUND)
        live = request(run.runner, "on the kept connection")
        await current.deliver(live)
        await run.deliveries.wait_for(live)

        retry = await subscribe(relay, run)  # the next attempt, one probe period later
        await run.logs.wait_for(RENEWED)
        assert await current.recv_until("CLOSE") == ["CLOSE", "jobs"]
        assert retry.number == 3
        assert run.ends == []


async def test_a_forged_copy_never_shadows_the_genuine_event() -> None:
    async with StandInRelay() as relay, listening(relay.url) as run:
        connection = await subscribe(relay, run)
        genuine = request(run.runner, "genuine")
        other = sign(SecretKey.generate(), 1, [], "x", 1)
        forged = dataclasses.replace(genuine, sig=other.sig)
        await connection.deliver(forged)
        await connection.deliver(forged)
        await connection.deliver(genuine)
        await connection.deliver(genuine)
        marker = request(run.runner, "marker")
        await connection.deliver(marker)
        await run.deliveries.wait_for(marker)
        # The forgery is handed over (the handler drops it and logs why) but never remembered.
        assert [event.sig for event in run.deliveries.events[:3]] == [forged.sig, forged.sig, genuine.sig]
        assert run.deliveries.count(genuine) == 3


async def test_a_relay_that_challenges_late_gets_the_subscription_again_after_auth() -> None:
    async with StandInRelay(challenge=False) as relay, listening(relay.url) as run:
        connection = await relay.accept()
        await connection.expect_subscription(run.runner, eose=False)
        connection.challenge = "late-challenge"
        await connection.send(["AUTH", connection.challenge])
        await connection.send(["CLOSED", "jobs", "auth-required: we only serve known runners"])
        await connection.authenticate(run.runner)
        await connection.expect_subscription(run.runner)
        await run.logs.wait_for(SUBSCRIBED)
        assert run.ends == []


# back-off (runner.md §3.1 step 7) and stopping


def test_backoff_doubles_to_a_minute_and_resets() -> None:
    backoff = Backoff()
    assert [backoff.next() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    backoff.reset()
    assert [backoff.next() for _ in range(2)] == [1, 2]


async def test_an_unreachable_relay_is_retried_with_a_doubling_back_off() -> None:
    async with listening(unused_port_url(), stop_after_sleeps=8) as run:
        await run.logs.wait_for("reconnecting in", count=8)
    assert run.sleeps == [1, 2, 4, 8, 16, 32, 60, 60]
    assert all(line.startswith("relay: cannot reach the relay: ") for line in run.logs.lines)
    assert [line.rsplit("reconnecting in ", 1)[1] for line in run.logs.lines] == [
        f"{n} s" for n in (1, 2, 4, 8, 16, 32, 60, 60)
    ]
    assert all(not end.subscribed for end in run.ends)


async def test_the_back_off_resets_after_a_connection_that_subscribed() -> None:
    async with StandInRelay() as relay, listening(relay.url) as run:
        for _ in range(2):
            await (await relay.accept()).close()
        subscribed = await subscribe(relay, run)
        await run.logs.wait_for(SUBSCRIBED)
        await subscribed.close()
        await (await relay.accept()).close()
        await relay.accept()  # the fifth connection: the fourth sleep is over
        assert run.sleeps == [1, 2, 1, 2]
        assert [end.subscribed for end in run.ends] == [False, False, True, False]
        assert run.ends[2].why.startswith("the relay closed the socket")


async def test_stop_ends_the_loop_while_connected_and_while_connecting() -> None:
    async with StandInRelay() as relay:
        async with listening(relay.url) as run:  # leaving the block stops the loop and awaits it
            connection = await subscribe(relay, run)
            await run.logs.wait_for(SUBSCRIBED)
        await asyncio.wait_for(connection.closed.wait(), BOUND)
        assert not any("reconnecting" in line for line in run.logs.lines)

        async with listening(relay.url) as run:
            connecting = await relay.accept()  # challenged, never answered: the listener is mid-connect
            assert await connecting.recv() is not None  # its AUTH answer
        await asyncio.wait_for(connecting.closed.wait(), BOUND)
        assert run.logs.lines == []
        assert len(relay.connections) == 2


# the pieces


def test_the_filter_and_the_probe() -> None:
    runner = "ab" * 32
    jobs = requests_filter(runner, 1234)
    assert jobs.to_json() == {"kinds": [25920], "#p": [runner], "since": 1234}
    probe = probe_request("alive-7", jobs)
    assert probe.to_json() == ["REQ", "alive-7", {"kinds": [25920], "#p": [runner], "since": 1234, "limit": 0}]
    assert is_probe_id("alive-7")
    assert not is_probe_id("jobs")


def test_catch_up_reaches_back_one_request_window_before_the_newest_handled_request() -> None:
    now = 1_800_000_000
    assert catch_up_since(now, None) == now - 600
    assert catch_up_since(now, now - 3_600) == now - 4_200
    assert catch_up_since(now, now + 200) == now - 600  # a clock ahead of ours counts as now


@pytest.mark.parametrize(("seconds", "text"), [(30.0, "30"), (2700, "2700"), (0.3, "0.3"), (0.25, "0.25")])
def test_seconds_print_the_way_the_reference_prints_them(seconds: float, text: str) -> None:
    assert seconds_text(seconds) == text


def test_liveness_periods_are_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Liveness(probe=0)
