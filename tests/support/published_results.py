"""Published results (3189) on a real relay with their test set in the real embedded blob server, and spoiled
variants, for the reader's and `verify`'s tests.

A `Published` world holds nostr-sdk's LocalRelay, the embedded Blossom server, the example test set released by
a suite author, the example tool released by the runner, and a hosted run's signed request (25920) by a
trainer. `hosted_result` builds the report that run would have written (the sample report, naming that suite
release and that tool release) and the 3189 the runner publishes for it, with real signatures. Spoiling one
rule is done on the signed event's parts (`spoiled`), not through the contract builders, which refuse to
build what a reader refuses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.contracts.hosted import request_tags
from eval_runner.contracts.publication import Citation, publication
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Report, Verdict, report_ref
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, SecretKey, sign
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import SuiteRelease, release_suite, upload_and_release
from eval_runner.service.releases.tools import extension_release
from tests.support.paths import EXAMPLE
from tests.support.published_suites import example_release
from tests.support.sample_reports import Spec, report
from tests.support.stand_in_relay import local_relay


def secret(label: str) -> SecretKey:
    return SecretKey(hashlib.sha256(f"published-results: {label}".encode()).digest())


RUNNER = secret("the runner")
AUTHOR = secret("a suite author")
TRAINER = secret("a trainer")
OTHER = secret("another trainer")


@dataclass
class Published:
    """The relay, the blob store, the released test set and tool, ready for results."""

    relay_url: str
    relay: RelayClient
    server: BlobServer
    store: BlobStore
    suite: SuiteRelease
    suite_pointer: EventRef
    tool_pointer: EventRef

    async def release_suite(self, author: SecretKey, package: str) -> tuple[SuiteRelease, EventRef]:
        """The example test set released again, as `<author>:<package>` (another test set)."""
        release = example_release(author.public_key().to_hex(), package)
        async with BlobStore([self.server.url], self.server.url, author) as store:
            relay = RelayClient(self.relay_url, author, challenge_wait=0.05)
            return release, (await release_suite(release, secret=author, blobs=store, relay=relay)).event


def signed_request(trainer: SecretKey, runner: str = "", *, at: int | None = None) -> Event:
    """A 25920 to the runner, as a trainer signs one (its content is not read by a reader)."""
    now = int(time.time()) if at is None else at
    target = runner or RUNNER.public_key().to_hex()
    return sign(trainer, 25920, request_tags(target, now + 3600), "sealed to the runner", now)


def suite_ref(release: SuiteRelease, pointer: EventRef | None) -> ArtifactRef:
    return dataclasses.replace(release.suite, event=pointer)


def hosted_report(
    world: Published,
    request: Event,
    *,
    suite: ArtifactRef | None = None,
    verdict: Verdict = Verdict.PASS,
    tool: EventRef | None = None,
) -> Report:
    """The report of a hosted run of `request`, on the released test set (or `suite`) and tool."""
    spec = Spec(
        evaluator=RUNNER.public_key().to_hex(),
        verdict=verdict,
        requester=EventRef(id=request.id, pubkey=request.pubkey, kind=25920),
        suite_release=world.suite_pointer,
        subject_release=tool or world.tool_pointer,
    )
    return dataclasses.replace(report(spec), suite=suite or suite_ref(world.suite, world.suite_pointer))


def result_event(
    report_value: Report, request: Event | None, *, cites: Citation | None = None, at: int | None = None
) -> Event:
    """The 3189 the runner signs for a report (with the run's request inline)."""
    parts = publication(report_ref(report_value)[0], cites=cites, request=request)
    return sign(RUNNER, parts.kind, parts.tags, parts.content, int(time.time()) if at is None else at)


def spoiled(
    event: Event,
    *,
    tags: Callable[[list[list[str]]], list[list[str]]] | None = None,
    content: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Event:
    """`event` with its tags and/or content changed, signed again by the runner (a well-signed bad result)."""
    new_tags = tags([list(tag) for tag in event.tags]) if tags is not None else [list(tag) for tag in event.tags]
    body = json.loads(event.content)
    text = json.dumps(content(body), separators=(",", ":")) if content is not None else event.content
    return sign(RUNNER, event.kind, new_tags, text, event.created_at)


@asynccontextmanager
async def published(tmp_path: Path) -> AsyncIterator[Published]:
    """A relay and blob server holding the example test set (by AUTHOR) and the example tool (by RUNNER)."""
    keys = [key.public_key().to_hex() for key in (AUTHOR, RUNNER, TRAINER, OTHER)]
    async with (
        local_relay() as url,
        BlobServer(tmp_path / "blobs", keys) as server,
        BlobStore([server.url], server.url, AUTHOR) as store,
        BlobStore([server.url], server.url, RUNNER) as runner_store,
    ):
        relay = RelayClient(url, AUTHOR, challenge_wait=0.05)
        release = example_release(AUTHOR.public_key().to_hex())
        pointer = (await release_suite(release, secret=AUTHOR, blobs=store, relay=relay)).event
        tool = extension_release(Catalog.load([EXAMPLE]).tools[0], publisher=RUNNER.public_key().to_hex())
        runner_relay = RelayClient(url, RUNNER, challenge_wait=0.05)
        tool_pointer = (
            await upload_and_release(
                tool.unsigned, tool.uploads(), secret=RUNNER, blobs=runner_store, relay=runner_relay
            )
        ).event
        yield Published(url, relay, server, store, release, pointer, tool_pointer)
