"""Property tests: NIP-44 round trips across the length boundaries, and that every parser fed junk
raises only its own typed error (never KeyError, TypeError, UnicodeError, RecursionError…)."""

from __future__ import annotations

import base64
import json

import nostr_sdk as sdk
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eval_runner.nostr import (
    Event,
    EventError,
    FrameError,
    Nip44Error,
    SecretKey,
    decrypt,
    encode,
    encrypt,
    parse_client_frame,
    parse_relay_frame,
    sign,
)
from eval_runner.nostr.nip44 import EXTENDED_MAX_PLAINTEXT, calc_padded_len

KEY = bytes.fromhex("c41c775356fd92eadc63ff5a0dc1da211b268cbea22316767095b2871ea1412d")
SIGNER = SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000003")
BOUNDARIES = [1, 32, 33, 255, 256, 257, 65_535, 65_536, EXTENDED_MAX_PLAINTEXT]

fast = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Strings as json.loads can produce them: any code point, including lone surrogates.
json_text = st.text(alphabet=st.characters(), max_size=40)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    json_text,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(json_text, children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=25, deadline=None)
@given(length=st.sampled_from(BOUNDARIES) | st.integers(min_value=1, max_value=EXTENDED_MAX_PLAINTEXT))
@example(length=65_535)
@example(length=65_536)
@example(length=EXTENDED_MAX_PLAINTEXT)
def test_round_trip_across_lengths(length: int) -> None:
    plaintext = "a" * length
    max_len = EXTENDED_MAX_PLAINTEXT if length > 65_535 else 65_535
    payload = encrypt(plaintext, KEY, max_len=max_len)
    prefix = 6 if length > 65_535 else 2
    assert len(base64.b64decode(payload)) == 1 + 32 + prefix + calc_padded_len(length) + 32
    assert decrypt(payload, KEY, max_len) == plaintext


@fast
@given(plaintext=st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=400))
def test_round_trip_any_unicode(plaintext: str) -> None:
    payload = encrypt(plaintext, KEY)
    assert len(base64.b64decode(payload)) == 1 + 32 + 2 + calc_padded_len(len(plaintext.encode("utf-8"))) + 32
    assert decrypt(payload, KEY) == plaintext


@fast
@given(junk=st.text(max_size=300))
def test_decrypt_junk_text_raises_only_nip44_error(junk: str) -> None:
    with pytest.raises(Nip44Error) as caught:
        decrypt(junk, KEY)
    assert caught.value.code == "decrypt_failed"


@fast
@given(raw=st.binary(min_size=0, max_size=400), version=st.sampled_from([0, 1, 2, 3]))
def test_decrypt_junk_bytes_raises_only_nip44_error(raw: bytes, version: int) -> None:
    payload = base64.b64encode(bytes([version]) + raw).decode("ascii")
    for max_len in (65_535, EXTENDED_MAX_PLAINTEXT):
        with pytest.raises(Nip44Error) as caught:
            decrypt(payload, KEY, max_len)
        assert caught.value.code == "decrypt_failed"


@fast
@given(data=st.data())
def test_any_single_character_change_is_refused(data: st.DataObject) -> None:
    payload = encrypt("a message of some length", KEY)
    index = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    replacement = data.draw(st.characters().filter(lambda char: char != payload[index]))
    with pytest.raises(Nip44Error):
        decrypt(payload[:index] + replacement + payload[index + 1 :], KEY)


def _error_code(value: object) -> str | None:
    """Parse and verify; the EventError code, or None if valid. Any other exception fails the test."""
    try:
        Event.from_json(value).verify()
    except EventError as error:
        return error.code
    return None


def _parse_event_or_typed_error(value: object) -> None:
    # Junk is never a valid signed event, and each stage has its own code.
    assert _error_code(value) in ("malformed", "invalid_id", "invalid_signature")


@fast
@given(
    fields=st.fixed_dictionaries(
        {},
        optional={
            name: json_values | st.sampled_from(["a" * 64, "a" * 128, 1, [["p", "x"]]])
            for name in ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
        },
    )
)
def test_event_like_objects_raise_only_event_error(fields: dict[str, object]) -> None:
    _parse_event_or_typed_error(fields)


@fast
@given(value=json_values)
def test_event_from_json_raises_only_event_error(value: object) -> None:
    _parse_event_or_typed_error(value)


frame_texts = st.one_of(
    st.text(max_size=200),
    st.builds(
        lambda kind, rest: json.dumps([kind, *rest]),
        st.sampled_from(["EVENT", "EOSE", "OK", "CLOSED", "AUTH", "NOTICE", "REQ", "CLOSE", "COUNT"]),
        st.lists(json_values, max_size=4),
    ),
)


@fast
@given(text=frame_texts)
def test_frame_parsers_raise_only_frame_error(text: str) -> None:
    try:
        relay_frame = parse_relay_frame(text)
    except FrameError:
        pass
    else:  # whatever parses re-encodes to the same record
        assert parse_relay_frame(encode(relay_frame)) == relay_frame
    try:
        client_frame = parse_client_frame(text)
    except FrameError:
        pass
    else:
        assert parse_client_frame(encode(client_frame)) == client_frame


unicode_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=60)


@settings(max_examples=40, deadline=None)
@given(
    content=unicode_text,
    tags=st.lists(st.lists(unicode_text, min_size=1, max_size=3), max_size=4),
    created_at=st.integers(min_value=0, max_value=2**32),
    kind=st.integers(min_value=0, max_value=65_535),
)
def test_ids_agree_with_nostr_sdk(content: str, tags: list[list[str]], created_at: int, kind: int) -> None:
    ours = sign(SIGNER, kind, tags, content, created_at)
    assert Event.from_json(json.loads(json.dumps(ours.to_json()))) == ours
    theirs = sdk.Event.from_json(json.dumps(ours.to_json()))
    assert theirs.id().to_hex() == ours.id
    assert theirs.verify()
