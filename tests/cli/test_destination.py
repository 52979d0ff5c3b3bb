"""Which runner `eval-runner trainer` sends to, on which relay: the runner's default follows the relay (the
production key on the production relay, the local runner's key, as `eval-runner pubkey` prints it, on a
loopback relay), a pair that cannot be right is refused with why, and both flags given are honoured."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from eval_runner.cli.destination import LOCAL_RELAY, PRODUCTION_RELAY, destination
from eval_runner.cli.parser import UsageError
from eval_runner.contracts.hosted import RUNNER
from eval_runner.nostr import SecretKey
from eval_runner.service.keyfile import ensure_key, pubkey_main
from eval_runner.trainer.client import TrainerError

OTHER = SecretKey.generate().public_key().to_hex()


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    """An environment whose local runner has made its key (`<state>/runner-key`, as `serve` makes it)."""
    environ = {"HOME": str(tmp_path / "home"), "EVAL_RUNNER_STATE": str(tmp_path / "state")}
    (tmp_path / "state").mkdir(mode=0o700)
    ensure_key(tmp_path / "state" / "runner-key")
    return environ


def printed_pubkey(environ: dict[str, str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert pubkey_main(stdout=out, stderr=err, environ=environ) == 0, err.getvalue()
    return out.getvalue().strip()


def test_by_default_the_local_relay_goes_with_the_local_runners_key(state: dict[str, str]) -> None:
    found = destination(None, None, state)
    assert found.relay == LOCAL_RELAY == "ws://127.0.0.1:7447"
    assert found.runner == printed_pubkey(state)
    assert found.runner != RUNNER


@pytest.mark.parametrize("relay", ["ws://localhost:7447", "ws://127.0.0.1:9", "ws://[::1]:7447"])
def test_any_loopback_relay_goes_with_the_local_runner(state: dict[str, str], relay: str) -> None:
    assert destination(relay, None, state).runner == printed_pubkey(state)
    assert destination(None, None, {**state, "EVAL_RUNNER_RELAY": relay}).relay == relay


def test_the_local_key_is_the_one_pubkey_prints_when_a_key_file_is_named(tmp_path: Path) -> None:
    named = tmp_path / "elsewhere" / "key"
    named.parent.mkdir()
    key, _ = ensure_key(named)
    environ = {"HOME": str(tmp_path), "EVAL_RUNNER_KEY_FILE": str(named)}
    assert destination(None, None, environ).runner == key.public_key().to_hex() == printed_pubkey(environ)


def test_the_production_relay_goes_with_the_production_key(state: dict[str, str]) -> None:
    assert destination(PRODUCTION_RELAY, None, state).runner == RUNNER
    assert destination(None, None, {**state, "EVAL_RUNNER_RELAY": PRODUCTION_RELAY + "/"}).runner == RUNNER


def test_with_no_local_key_the_person_is_told_how_to_get_one(tmp_path: Path) -> None:
    environ = {"EVAL_RUNNER_STATE": str(tmp_path / "state")}
    with pytest.raises(TrainerError) as caught:
        destination(None, None, environ)
    assert caught.value.code == "input"
    assert caught.value.message == (
        f"the local runner's key is unknown (the runner key {tmp_path}/state/runner-key: No such file or "
        "directory); start `eval-runner serve` once to make it, or pass --runner PUBKEY"
    )


def test_another_relay_has_no_default_runner(state: dict[str, str]) -> None:
    with pytest.raises(UsageError, match=r"^say which runner listens on wss://relay\.example: --runner PUBKEY"):
        destination("wss://relay.example", None, state)
    assert destination("wss://relay.example", OTHER, state).runner == OTHER
    assert destination(None, None, {**state, "EVAL_RUNNER_RELAY": "wss://relay.example", "EVAL_RUNNER_PUBKEY": OTHER})


def test_the_production_key_on_a_local_relay_is_refused_with_why(state: dict[str, str]) -> None:
    for relay, runner, environ in (
        (None, RUNNER, state),
        ("ws://127.0.0.1:7447", None, {**state, "EVAL_RUNNER_PUBKEY": RUNNER}),
        (None, None, {**state, "EVAL_RUNNER_PUBKEY": RUNNER}),
    ):
        with pytest.raises(UsageError) as caught:
            destination(relay, runner, environ)
        assert str(caught.value) == (
            f"the production runner listens on {PRODUCTION_RELAY}, not on the local relay ws://127.0.0.1:7447: "
            f"pass --relay {PRODUCTION_RELAY} to reach it, --runner with a local runner's key, or give both "
            "--relay and --runner to send there anyway"
        )


def test_another_key_on_the_production_relay_is_refused_with_why(state: dict[str, str]) -> None:
    local = printed_pubkey(state)
    for relay, runner, environ in (
        (None, local, {**state, "EVAL_RUNNER_RELAY": PRODUCTION_RELAY}),
        (PRODUCTION_RELAY, None, {**state, "EVAL_RUNNER_PUBKEY": local}),
    ):
        with pytest.raises(UsageError) as caught:
            destination(relay, runner, environ)
        assert str(caught.value) == (
            f"{local} is not the production runner, the one that listens on {PRODUCTION_RELAY}: a runner on "
            f"this computer listens on its local relay (--relay {LOCAL_RELAY}); or give both --relay and "
            "--runner to send there anyway"
        )


def test_both_given_on_the_command_line_are_honoured(state: dict[str, str]) -> None:
    assert destination(LOCAL_RELAY, RUNNER, state).runner == RUNNER
    assert destination(PRODUCTION_RELAY, OTHER, state).runner == OTHER
    npub = SecretKey.generate().public_key()
    assert destination(PRODUCTION_RELAY, npub.to_bech32(), state).runner == npub.to_hex()


@pytest.mark.parametrize(
    ("relay", "runner", "said"),
    [
        ("http://relay.example", OTHER, "the relay must be a ws:// or wss:// URL, not 'http://relay.example'"),
        (LOCAL_RELAY, "not-a-key", "the runner's key must be 64 hex or an npub, not 'not-a-key'"),
    ],
)
def test_a_malformed_relay_or_key_is_a_usage_error(state: dict[str, str], relay: str, runner: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        destination(relay, runner, state)
    assert str(caught.value) == said
