"""Opening a delivered 25920: what opens (and as what), what is dropped and why, and the seen-id memory."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from eval_runner.contracts.execution import EXECUTION_SCHEMA, fingerprint
from eval_runner.contracts.hosted import build_execute_body, request_tags
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.nostr import ConversationKeys, Event, SecretKey, conversation_key, encrypt, sign
from eval_runner.nostr.nip44 import EXTENDED_MAX_PLAINTEXT
from eval_runner.service.requests.opening import (
    SEEN_IDS,
    DropError,
    OpenedControl,
    OpenedExecute,
    SeenIds,
    drop_line,
    open_request,
)
from tests.support.trainer_side import catalog_tool, draft, run_input

RUNNER = SecretKey.parse("11" * 32)
TRAINER = SecretKey.parse("22" * 32)
NOW = int(time.time())
DEFINITION: JsonValue = {
    "id": "0" * 64 + ":codebase-brief/codebase-brief",
    "artifact": {"digest": "sha256:" + "ab" * 32, "size": 10, "media_type": "application/json"},
}


def runner_hex() -> str:
    return RUNNER.public_key().to_hex()


def sealed(body: JsonValue, tags: list[list[str]], *, created_at: int = NOW, kind: int = 25920) -> Event:
    key = conversation_key(TRAINER, RUNNER.public_key())
    limit = EXTENDED_MAX_PLAINTEXT
    return sign(TRAINER, kind, tags, encrypt(canonical(body).decode(), key, max_len=limit), created_at)


def execute_body(**meta: JsonValue) -> dict[str, JsonValue]:
    body = build_execute_body(runner_hex(), "req-1", run_input(DEFINITION, draft(catalog_tool(DEFINITION))), NOW)
    value = body.to_json()
    if meta:
        value["meta"] = dict(meta)
    return value


def execute_event(*, created_at: int = NOW, **meta: JsonValue) -> Event:
    body = execute_body(**meta)
    deadline = body["deadline"]
    assert isinstance(deadline, int)
    return sealed(body, request_tags(runner_hex(), deadline), created_at=created_at)


def control_body(kind: str = "status", **fields: JsonValue) -> dict[str, JsonValue]:
    base: dict[str, JsonValue] = {"v": EXECUTION_SCHEMA, "requires": [], "type": kind, "request": "req-1"}
    return {**base, "attempt": 1, "run": "req-1", **fields}


def dropped(event: Event, now: int = NOW) -> str:
    with pytest.raises(DropError) as caught:
        open_request(event, RUNNER, now)
    return caught.value.reason


# -- what opens ------------------------------------------------------------------------------------


def test_an_execute_opens_with_its_signer_as_principal_and_its_fingerprint() -> None:
    event = execute_event()
    opened = open_request(event, RUNNER, NOW, ConversationKeys())
    assert isinstance(opened, OpenedExecute)
    assert opened.principal == TRAINER.public_key().to_hex()
    assert opened.body.request == "req-1"
    assert opened.fingerprint == fingerprint(opened.body)
    assert opened.bytes_in == len(event.content) > 0


def test_a_plaintext_past_nip44s_standard_bound_still_opens_up_to_256_kib() -> None:
    event = execute_event(padding="x" * 100_000)
    opened = open_request(event, RUNNER, NOW)
    assert isinstance(opened, OpenedExecute)
    assert opened.body.meta == {"padding": "x" * 100_000}


def test_a_control_opens_with_the_execute_event_it_names() -> None:
    target = "ab" * 32
    opened = open_request(
        sealed(control_body("cancel", reason="stop"), [["p", runner_hex()], ["e", target]]), RUNNER, NOW
    )
    assert isinstance(opened, OpenedControl)
    assert (opened.body.type, opened.body.reason, opened.target) == ("cancel", "stop", target)


@pytest.mark.parametrize("age", [600, -300, 0])
def test_the_window_is_600_seconds_back_and_300_ahead_inclusive(age: int) -> None:
    assert isinstance(open_request(execute_event(created_at=NOW - age), RUNNER, NOW), OpenedExecute)


# -- what is dropped -------------------------------------------------------------------------------


def test_another_kind_is_dropped() -> None:
    body = execute_body()
    assert dropped(sealed(body, [["p", runner_hex()]], kind=1)) == "kind 1 is not an execution request (25920)"


def test_a_zeroed_signature_is_dropped() -> None:
    event = replace(execute_event(), sig="0" * 128)
    assert "invalid_signature" in dropped(event)


def test_tags_altered_after_signing_are_dropped() -> None:
    event = execute_event()
    altered = replace(event, tags=((*event.tags, ("t", "extra"))))
    assert "invalid_id" in dropped(altered)


@pytest.mark.parametrize(
    "addressed",
    [["c" * 64], [runner_hex(), "c" * 64], [], [runner_hex(), runner_hex()]],
    ids=["another worker", "two workers", "nobody", "us twice"],
)
def test_p_tags_must_be_exactly_this_runner(addressed: list[str]) -> None:
    body = execute_body()
    tags = [["p", value] for value in addressed] + [["expiration", str(body["deadline"])]]
    assert "not exactly this runner" in dropped(sealed(body, tags))


@pytest.mark.parametrize(("age", "words"), [(601, "601 s ago"), (660, "660 s ago"), (-301, "301 s ahead")])
def test_outside_the_window_is_dropped_as_stale(age: int, words: str) -> None:
    assert (
        dropped(execute_event(created_at=NOW - age))
        == f"stale: created {words}; the window is {600 if age > 0 else 300} s"
    )


def test_content_for_another_key_is_dropped() -> None:
    other = SecretKey.generate()
    body = execute_body()
    content = encrypt(canonical(body).decode(), conversation_key(TRAINER, other.public_key()))
    event = sign(TRAINER, 25920, request_tags(runner_hex(), int(str(body["deadline"]))), content, NOW)
    assert "decrypt_failed" in dropped(event)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({**execute_body(), "v": "openagents.execution.v2"}, "unsupported_version"),
        ({**execute_body(), "Token": "abc"}, "names a credential"),
        ({**execute_body(), "type": "launch"}, "must be execute, status, replay or cancel"),
        ({**execute_body(), "retain_until": 1}, "retain_until"),
        ({key: value for key, value in execute_body().items() if key != "lock"}, "lock: is required"),
    ],
    ids=["version", "credential", "type", "retention", "shape"],
)
def test_bodies_that_do_not_open_are_dropped(body: dict[str, JsonValue], fragment: str) -> None:
    deadline = execute_body()["deadline"]
    assert fragment in dropped(sealed(body, request_tags(runner_hex(), int(str(deadline)))))


def test_an_execute_whose_deadline_is_not_its_expiration_tag_is_dropped() -> None:
    body = execute_body()
    assert "expiration" in dropped(sealed(body, [["p", runner_hex()], ["expiration", str(NOW + 10)]]))
    assert "no expiration tag" in dropped(sealed(body, [["p", runner_hex()]]))


@pytest.mark.parametrize(
    "targets", [[], ["ab" * 32, "cd" * 32], ["AB" * 32], ["ab" * 16]], ids=["none", "two", "upper", "short"]
)
def test_a_control_must_name_exactly_one_execute_event(targets: list[str]) -> None:
    tags = [["p", runner_hex()]] + [["e", target] for target in targets]
    assert "exactly one execute event" in dropped(sealed(control_body(), tags))


def test_the_drop_line_names_twelve_characters_of_the_id() -> None:
    assert drop_line("0123456789abcdef" * 4, "why") == "dropped 0123456789ab: why"


def test_a_drop_never_echoes_a_key() -> None:
    reasons = [dropped(replace(execute_event(), sig="0" * 128)), dropped(execute_event(created_at=NOW - 700))]
    for reason in reasons:
        assert RUNNER.to_hex() not in reason
        assert TRAINER.to_hex() not in reason


# -- the seen-id memory ----------------------------------------------------------------------------


def test_seen_ids_remember_the_last_1024() -> None:
    seen = SeenIds()
    ids = [f"{number:064x}" for number in range(SEEN_IDS + 1)]
    assert all(seen.first_time(event_id) for event_id in ids[:SEEN_IDS])
    assert not seen.first_time(ids[0])
    assert seen.first_time(ids[SEEN_IDS])  # evicts the oldest
    assert len(seen) == SEEN_IDS
    assert seen.first_time(ids[0])
    assert not seen.first_time(ids[SEEN_IDS])
