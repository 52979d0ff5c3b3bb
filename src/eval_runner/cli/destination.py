"""Where `eval-runner trainer` sends: the relay, and the runner listening on it.

A relay and a runner key are a pair: the production runner listens only on the production relay, and a
runner on this computer only on its local relay. A default that pairs a local relay with the production key
sends requests nobody reads, so the runner's default follows the relay, and a pair that cannot be right
is refused with why, unless the person gave both on the command line (they know).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from eval_runner.cli.parser import UsageError
from eval_runner.contracts.hosted import RUNNER
from eval_runner.nostr import KeyFormatError, PublicKey
from eval_runner.service.config import DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT, key_file_location
from eval_runner.service.keyfile import KeyFileError, load_key
from eval_runner.trainer.client import TrainerError

PRODUCTION_RELAY: Final = "wss://relay.openagents.com"
LOCAL_RELAY: Final = f"ws://{DEFAULT_LISTEN_HOST}:{DEFAULT_LISTEN_PORT}"
RELAY_ENV: Final = "EVAL_RUNNER_RELAY"
RUNNER_ENV: Final = "EVAL_RUNNER_PUBKEY"
ANYWAY: Final = "or give both --relay and --runner to send there anyway"
#: The rule in a sentence, for the commands' help.
RULE: Final = (
    f"The runner goes with the relay: on {PRODUCTION_RELAY} the production runner, on a loopback relay the "
    "local runner (the key `eval-runner pubkey` prints for it), elsewhere --runner is needed. The production "
    "key with a loopback relay, or another key with the production relay, is refused unless both --relay and "
    "--runner are given."
)


@dataclass(frozen=True, slots=True)
class Destination:
    """The relay URL and the runner's key (64 hex) a trainer command sends to."""

    relay: str
    runner: str


def destination(relay: str | None, runner: str | None, environ: Mapping[str, str]) -> Destination:
    """The relay (`relay` from --relay, else $EVAL_RUNNER_RELAY, else the local relay) and the runner
    (`runner` from --runner, else $EVAL_RUNNER_PUBKEY, else the key that goes with the relay: the production
    key on the production relay, the local runner's key on a loopback relay, none elsewhere).

    Raises:
        UsageError: a relay that is not ws:// or wss://, a key that is not one, no runner for another relay,
            or a pair that cannot be right when not both were given on the command line.
        TrainerError: the local runner's key cannot be read (`input`).
    """
    url = relay or environ.get(RELAY_ENV) or LOCAL_RELAY
    if not url.startswith(("ws://", "wss://")):
        raise UsageError(f"the relay must be a ws:// or wss:// URL, not {url!r}")
    text = runner or environ.get(RUNNER_ENV)
    key = _runner_key(text) if text else _runner_for(url, environ)
    if relay is None or runner is None:
        _check_pair(url, key)
    return Destination(url, key)


def is_production(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme == "wss" and parts.hostname == urlsplit(PRODUCTION_RELAY).hostname and parts.path in ("", "/")


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_runner(environ: Mapping[str, str]) -> str:
    """The key of the runner serving the local relay, as `eval-runner pubkey` prints it for that runner:
    `$EVAL_RUNNER_KEY_FILE`, else `<state>/runner-key` (`$EVAL_RUNNER_RELAY` is the trainer's relay here, not
    a sign that the runner uses another relay's key file)."""
    path, _ = key_file_location({name: value for name, value in environ.items() if name != RELAY_ENV})
    try:
        return load_key(path).public_key().to_hex()
    except KeyFileError as error:
        raise TrainerError(
            "input",
            f"the local runner's key is unknown ({error}); start `eval-runner serve` once to make it, "
            "or pass --runner PUBKEY",
        ) from None


def _runner_key(text: str) -> str:
    try:
        return PublicKey.parse(text).to_hex()
    except KeyFormatError:
        raise UsageError(f"the runner's key must be 64 hex or an npub, not {text!r}") from None


def _runner_for(url: str, environ: Mapping[str, str]) -> str:
    if is_production(url):
        return RUNNER
    if is_loopback(url):
        return local_runner(environ)
    raise UsageError(f"say which runner listens on {url}: --runner PUBKEY (or ${RUNNER_ENV})")


def _check_pair(url: str, runner: str) -> None:
    if runner == RUNNER and is_loopback(url):
        raise UsageError(
            f"the production runner listens on {PRODUCTION_RELAY}, not on the local relay {url}: pass "
            f"--relay {PRODUCTION_RELAY} to reach it, --runner with a local runner's key, {ANYWAY}"
        )
    if runner != RUNNER and is_production(url):
        raise UsageError(
            f"{runner} is not the production runner, the one that listens on {url}: a runner on this "
            f"computer listens on its local relay (--relay {LOCAL_RELAY}); {ANYWAY}"
        )
