"""Relay protocol frames (both directions) and filters."""

from __future__ import annotations

import json

import pytest

from eval_runner.nostr import (
    AuthChallenge,
    AuthResponse,
    ClientEvent,
    ClientFrame,
    Close,
    Closed,
    Eose,
    Event,
    Filter,
    FrameError,
    Notice,
    Ok,
    RelayEvent,
    RelayFrame,
    Req,
    SecretKey,
    auth_event,
    encode,
    parse_client_frame,
    parse_relay_frame,
    sign,
)

R = "a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0"


@pytest.fixture
def event(alice: SecretKey) -> Event:
    return sign(alice, 25920, [["p", R], ["e", "e" * 64], ["t", "run"], ["x", "1" * 64]], "ciphertext", 1_000)


def test_runner_subscription_text() -> None:
    jobs = Filter.build(kinds=[25920], tags={"p": [R]}, since=1_699_999_940)
    assert encode(Req("jobs", (jobs,))) == f'["REQ","jobs",{{"kinds":[25920],"#p":["{R}"],"since":1699999940}}]'
    probe = Filter.build(kinds=[25920], tags={"p": [R]}, since=5, limit=0)
    assert json.loads(encode(Req("alive-1", (probe,))))[2] == {"kinds": [25920], "#p": [R], "since": 5, "limit": 0}
    assert encode(Close("alive-1")) == '["CLOSE","alive-1"]'


def test_relay_frames_round_trip(event: Event) -> None:
    frames: list[RelayFrame] = [
        RelayEvent("jobs", event),
        Eose("jobs"),
        Ok(event.id, True, ""),
        Ok(event.id, False, "blocked: kind 1 not allowed"),
        Closed("q", "auth-required: sign in"),
        AuthChallenge("c-1"),
        Notice("slow down ✓"),
    ]
    for frame in frames:
        assert parse_relay_frame(encode(frame)) == frame


def test_client_frames_round_trip(event: Event, alice: SecretKey) -> None:
    filters = (
        Filter.build(ids=[event.id], authors=[event.pubkey], kinds=[1, 25920], since=1, until=2, limit=3),
        Filter.build(tags={"p": [R], "e": ["x", "y"], "t": [], "x": ["1" * 64]}),
    )
    frames: list[ClientFrame] = [
        ClientEvent(event),
        Req("q", filters),
        Close("q"),
        AuthResponse(auth_event(alice, "wss://relay", "c-1", 5)),
    ]
    for frame in frames:
        assert parse_client_frame(encode(frame)) == frame


def test_relay_event_is_parsed_not_verified(event: Event) -> None:
    forged = {**event.to_json(), "content": "changed"}
    parsed = parse_relay_frame(json.dumps(["EVENT", "jobs", forged]))
    assert isinstance(parsed, RelayEvent)
    assert not parsed.event.is_valid()


@pytest.mark.parametrize(
    ("text", "code", "path"),
    [
        ("", "malformed", ""),
        ("not json", "malformed", ""),
        ("{}", "malformed", ""),
        ("[]", "malformed", ""),
        ("[1]", "malformed", ""),
        ('["HELLO"]', "unknown_type", "[0]"),
        ('["REQ","q",{}]', "unknown_type", "[0]"),  # a client frame is not a relay frame
        ('["EOSE"]', "malformed", ""),
        ('["EOSE","q","extra"]', "malformed", ""),
        ('["EOSE",""]', "malformed", "[1]"),
        ('["EOSE","' + "s" * 65 + '"]', "malformed", "[1]"),
        ('["EOSE",7]', "malformed", "[1]"),
        ('["OK","","false","x"]', "malformed", "[1]"),
        ('["OK","' + "a" * 64 + '","false","x"]', "malformed", "[2]"),
        ('["OK","' + "a" * 64 + '",0,"x"]', "malformed", "[2]"),
        ('["OK","' + "a" * 64 + '",true]', "malformed", ""),
        ('["OK","' + "a" * 64 + '",true,null]', "malformed", "[3]"),
        ('["NOTICE",NaN]', "malformed", ""),
        ('["NOTICE",Infinity]', "malformed", ""),
        ('["CLOSED","q"]', "malformed", ""),
        ('["AUTH",{"id":1}]', "malformed", "[1]"),
        ('["EVENT","q",{"id":"x"}]', "malformed", "[2].id"),
        ('["EVENT","q",{"a":1,"a":2}]', "malformed", ""),
        ("[" * 100_000 + "]" * 100_000, "malformed", ""),
    ],
)
def test_bad_relay_frames(text: str, code: str, path: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_relay_frame(text)
    assert (caught.value.code, caught.value.path) == (code, path)


def test_frame_size_bound() -> None:
    with pytest.raises(FrameError) as caught:
        parse_relay_frame('["NOTICE","' + "n" * 100 + '"]', max_chars=50)
    assert caught.value.code == "too_large"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('["REQ","q"]', ""),
        ('["REQ","q",[]]', "[2]"),
        ('["REQ","q",{"kinds":[70000]}]', "[2].kinds[0]"),
        ('["REQ","q",{"authors":["ABC"]}]', "[2].authors[0]"),
        ('["REQ","q",{"#pp":["x"]}]', "[2].#pp"),
        ('["REQ","q",{"#1":["x"]}]', "[2].#1"),
        ('["REQ","q",{"#p":[1]}]', "[2].#p"),
        ('["REQ","q",{"search":"x"}]', "[2].search"),
        ('["REQ","q",{"since":-1}]', "[2].since"),
        ('["REQ","q",{"limit":true}]', "[2].limit"),
        ('["REQ","q",{"kinds":1}]', "[2].kinds"),
        ('["CLOSE"]', ""),
        ('["EOSE","q"]', "[0]"),
    ],
)
def test_bad_client_frames(text: str, path: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_client_frame(text)
    assert caught.value.path == path


def test_builders_validate() -> None:
    with pytest.raises(FrameError):
        Req("q", ())
    with pytest.raises(FrameError):
        Close("s" * 65)
    with pytest.raises(FrameError):
        Ok("A" * 64, True, "")
    with pytest.raises(FrameError):
        Filter.build(tags={"p": ["x"], "pp": ["y"]})
    with pytest.raises(FrameError):
        Filter(tags=(("p", ("x",)), ("p", ("y",))))
    with pytest.raises(FrameError):
        Filter.build(kinds=[True])


def test_filter_matches(event: Event) -> None:
    assert Filter().matches(event)
    assert Filter.build(ids=[event.id]).matches(event)
    assert not Filter.build(ids=["0" * 64]).matches(event)
    assert Filter.build(authors=["0" * 64, event.pubkey]).matches(event)
    assert not Filter.build(authors=[R]).matches(event)
    assert Filter.build(kinds=[1, 25920]).matches(event)
    assert not Filter.build(kinds=[26920]).matches(event)
    assert Filter.build(since=1_000, until=1_000).matches(event)  # both bounds inclusive
    assert not Filter.build(since=1_001).matches(event)
    assert not Filter.build(until=999).matches(event)
    assert Filter.build(limit=0).matches(event)  # limit does not affect matching


def test_filter_tag_matching(event: Event) -> None:
    assert Filter.build(tags={"p": ["0" * 64, R]}).matches(event)  # values are OR-ed
    assert Filter.build(tags={"p": [R], "t": ["run"], "x": ["1" * 64]}).matches(event)  # letters AND-ed
    assert not Filter.build(tags={"p": [R], "t": ["publish"]}).matches(event)
    assert not Filter.build(tags={"P": [R]}).matches(event)  # letters are case-sensitive
    assert not Filter.build(tags={"e": []}).matches(event)  # an empty list matches nothing
    assert not Filter.build(kinds=[]).matches(event)


def test_filter_only_first_value_counts(alice: SecretKey) -> None:
    tagged = sign(alice, 1, [["e", "a", "b"], ["d"]], "", 1)
    assert Filter.build(tags={"e": ["a"]}).matches(tagged)
    assert not Filter.build(tags={"e": ["b"]}).matches(tagged)
    assert not Filter.build(tags={"d": [""]}).matches(tagged)
