"""Publishing, as the end-to-end tests drive it: the environment of a runner that publishes, the publish input a
phone sends for a run's report, what the relay holds afterwards (read back through our own reader), and the
secret scan over every stored event.

The trainer library's own `publish` may not exist yet, so the input is built here from the contract
(`PublishInput`), exactly as wire.md §5.4.2 spells it.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval_runner.contracts.hosted import PublishInput
from eval_runner.contracts.publication import PROFILE_MARKER, PUBLICATION_KIND, Publication, read_publication
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.nostr import Event, Filter, SecretKey
from eval_runner.service.relay.connection import RelayClient
from tests.support.runner_tools import key_file
from tests.support.serve_process import free_port, runner_env

RELEASE_KIND = 3184
SEALED_KIND = 3188
REQUEST_KIND = 25920


def publish_input(report: ArtifactRef) -> JsonValue:
    """The `publish` input naming a run's report (its ArtifactRef as the run's result gave it)."""
    return PublishInput(report).to_json()


def publishing_env(
    base: Path, temp_root: Path, secret: SecretKey, catalog: Path, *, door_url: str, **extra: str
) -> dict[str, str]:
    """A runner that may publish: `serve` on a free loopback port under the key `secret` (kept in
    `base/keys`), over `catalog` (a copy it publishes itself, so it may release that catalog's test sets)."""
    return runner_env(
        base,
        temp_root,
        door_url=door_url,
        listen=f"127.0.0.1:{free_port()}",
        key_file=key_file(base / "keys" / "runner-key", secret),
        EVAL_RUNNER_CATALOG=str(catalog),
        **extra,
    )


def reader(url: str) -> RelayClient:
    """A one-shot relay client under a throwaway key (a reader needs no identity)."""
    return RelayClient(url, SecretKey.generate(), challenge_wait=0.05)


async def results_on(url: str) -> list[Event]:
    """Every published result the relay holds, as readers list them (`#t oa:ext-eval:v1`)."""
    return await reader(url).query(Filter.build(kinds=[PUBLICATION_KIND], tags={"t": [PROFILE_MARKER]}))


async def read_results_on(url: str) -> list[Publication]:
    """Every published result on the relay, through our reader (which raises on one that does not check)."""
    return [read_publication(event) for event in await results_on(url)]


async def stored(url: str, kinds: list[int]) -> list[Event]:
    return await reader(url).query(Filter.build(kinds=kinds))


def holding(events: list[Event], secrets: dict[str, str]) -> list[tuple[str, str]]:
    """(event id, secret name) for every stored event whose JSON holds a secret, anywhere."""
    found: list[tuple[str, str]] = []
    for event in events:
        text = json.dumps(event.to_json(), ensure_ascii=False)
        found.extend((event.id, name) for name, secret in secrets.items() if secret in text)
    return found
