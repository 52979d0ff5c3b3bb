"""The runner's service side for pipeline tests: a real relay, a real ledger, the pipeline behind a listener.

`hosted_service` starts nostr-sdk's LocalRelay in process, opens a ledger, quota and usage log in a temp
state directory, loads the catalog from `examples/codebase-brief`, and runs the pipeline behind the
requests listener and the answer publisher, exactly as `serve` wires them, with the stand-in suite
runner. The listener's `since` reaches an hour back, so an event older than the runner's open window
still reaches the pipeline (which must drop it). Events the relay itself refuses (bad signatures, an
expired deadline) are handed to `Service.deliver`, the same callback the listener calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.relay.connection import RelayError
from eval_runner.service.relay.liveness import SUBSCRIBED, RelayListener
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.admission import Admission
from eval_runner.service.requests.pipeline import Pipeline
from eval_runner.service.requests.quota import Quota
from eval_runner.service.settings import Limits
from eval_runner.service.usage import Record, UsageLog, read
from tests.support.captured_logs import LogLines, captured_logs
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import BOUND, local_relay
from tests.support.stand_in_suite import StandInSuiteRunner


class StandInRefusingRelay:
    """The real publisher, except that the relay refuses events of some kinds (as a relay's write policy may)."""

    def __init__(self, publisher: Publisher, kinds: frozenset[int]) -> None:
        self.publisher = publisher
        self.kinds = kinds

    async def publish(self, event: Event) -> None:
        if event.kind in self.kinds:
            raise RelayError("refused", f"the relay refused {event.kind}: blocked: not on this relay")
        await self.publisher.publish(event)


@dataclass
class Service:
    url: str
    secret: SecretKey
    pipeline: Pipeline
    ledger: Ledger
    suite: StandInSuiteRunner
    catalog: Catalog
    logs: LogLines
    state: Path
    temp_root: Path

    @property
    def runner(self) -> str:
        return self.secret.public_key().to_hex()

    async def deliver(self, event: Event) -> None:
        """Hand an event to the pipeline as the listener would."""
        await self.pipeline.handle(event)

    def usage(self) -> list[Record]:
        found = read(self.state / "usage")
        assert found.unreadable == 0
        return list(found.records)

    def close_admission(self) -> None:
        (self.state / "closed").touch()

    async def idle(self) -> None:
        await asyncio.wait_for(self.pipeline.wait_idle(), BOUND)


@asynccontextmanager
async def hosted_service(
    tmp_path: Path,
    *,
    limits: Limits | None = None,
    mode: str = "complete",
    refuse_kinds: frozenset[int] = frozenset(),
    secret: SecretKey | None = None,
) -> AsyncIterator[Service]:
    """The service over `tmp_path/state`; pass the `secret` of an earlier one to restart it over the same state."""
    state, temp_root = tmp_path / "state", tmp_path / "tmp"
    state.mkdir(exist_ok=True)
    temp_root.mkdir(exist_ok=True)
    secret = secret if secret is not None else SecretKey.generate()
    runner = secret.public_key().to_hex()
    limits = limits if limits is not None else Limits()
    catalog = Catalog.load([EXAMPLE])
    suite = StandInSuiteRunner(mode)
    with captured_logs() as logs:
        async with local_relay() as url, Publisher(url, secret, challenge_wait=0.05) as publisher:
            with Ledger.open(ledger_path(state), runner, int(time.time())) as ledger:
                pipeline = Pipeline(
                    secret=secret,
                    ledger=ledger,
                    admission=Admission(runner=runner, catalog=catalog, state=state, temp_root=temp_root),
                    suite_runner=suite,
                    publisher=StandInRefusingRelay(publisher, refuse_kinds) if refuse_kinds else publisher,
                    quota=Quota(state / "quota.json"),
                    usage=UsageLog(state / "usage"),
                    limits=limits,
                )
                async with _listening(url, secret, pipeline, logs):
                    yield Service(url, secret, pipeline, ledger, suite, catalog, logs, state, temp_root)
                    suite.release()
                    await asyncio.wait_for(pipeline.wait_idle(), BOUND)


@asynccontextmanager
async def _listening(url: str, secret: SecretKey, pipeline: Pipeline, logs: LogLines) -> AsyncIterator[None]:
    """The pipeline behind a requests listener whose `since` reaches an hour back, once it has subscribed."""
    listener = RelayListener(
        url,
        secret,
        deliver=pipeline.handle,
        since=lambda: int(time.time()) - 3600,
        challenge_wait=0.05,
    )
    listening = asyncio.create_task(listener.run_forever())
    try:
        await logs.wait_for(SUBSCRIBED)
        yield
    finally:
        listener.stop()
        await asyncio.wait_for(listening, BOUND)
        await pipeline.aclose()
