"""The pipeline `serve` builds, driven one delivered event at a time from synchronous test code.

Property tests (hypothesis) call test functions synchronously, thousands of times, and share one service
across the examples so state builds up as it does in a real runner. `DirectPipeline` therefore owns an
event loop (`asyncio.Runner`) and a pipeline built with `Pipeline.from_config` from a configuration that
holds a door key, over a real ledger, quota and usage log in a temp state directory, with the stand-in
suite runner and a publisher that records what is sent (`StandInPublisher`). `deliver` hands one event to
`Pipeline.handle`, waits until every run it started has sent its result, and returns what was published.

The clock is fixed (`NOW`), so a test can decide, with the same `now`, what the runner must do with an
event near the edge of the open window.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nostr_sdk as sdk

from eval_runner.contracts.answers import Answer, read_answer
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.config import Config
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.requests.pipeline import Pipeline
from tests.support.captured_logs import LogLines, captured_logs
from tests.support.paths import EXAMPLE
from tests.support.stand_in_publisher import StandInPublisher
from tests.support.stand_in_relay import BOUND
from tests.support.stand_in_suite import StandInSuiteRunner

DOOR_KEY = "sk-door-2f9c1e7b5a3d48e6b0c4f1a9d7e2c3b8"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Opened:
    """An answer the runner published, checked and decrypted as the phone does it (with nostr-sdk)."""

    event: Event
    answer: Answer


class DirectPipeline:
    """One runner's pipeline over a temp state directory. Use as a context manager; `close()` at the end."""

    def __init__(self, root: Path, *, now: int | None = None) -> None:
        self.now = int(time.time()) if now is None else now
        self.secret = SecretKey.generate()
        self.runner = self.secret.public_key().to_hex()
        self.state, temp_root = root / "state", root / "tmp"
        self.state.mkdir()
        temp_root.mkdir()
        self.config = Config.from_env(
            {
                "EVAL_RUNNER_CATALOG": str(EXAMPLE),
                "EVAL_RUNNER_CODER": "/usr/bin/true",
                "CODER_DOOR_KEY": DOOR_KEY,
                "EVAL_RUNNER_STATE": str(self.state),
                "EVAL_RUNNER_TMP": str(temp_root),
            }
        )
        self.catalog = Catalog.load(self.config.catalog)
        self._capturing = captured_logs()
        self.logs: LogLines = self._capturing.__enter__()
        self.publisher = StandInPublisher()
        self.suite = StandInSuiteRunner()
        self._loop = asyncio.Runner()
        self.ledger = Ledger.open(ledger_path(self.state), self.runner, self.now)
        self.pipeline = self.run(self._build())

    async def _build(self) -> Pipeline:
        return Pipeline.from_config(
            self.config,
            secret=self.secret,
            ledger=self.ledger,
            catalog=self.catalog,
            suite_runner=self.suite,
            publisher=self.publisher,
            clock=lambda: float(self.now),
        )

    def __enter__(self) -> DirectPipeline:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.run(self.pipeline.aclose())
        finally:
            self.ledger.close()
            self._loop.close()
            self._capturing.__exit__(None, None, None)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work` on the pipeline's loop, bounded."""
        return self._loop.run(asyncio.wait_for(work, BOUND))

    def deliver(self, event: Event) -> list[Event]:
        """Hand `event` to the pipeline as the listener does; everything published until the runs it started
        have all answered."""
        mark = self.publisher.mark()
        self.run(self._handle(event))
        return self.publisher.since(mark)

    async def _handle(self, event: Event) -> None:
        await self.pipeline.handle(event)
        await self.pipeline.wait_idle()

    @property
    def log_text(self) -> str:
        return self.logs.text

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a log line: the runner's secret key, both spellings, and the door key."""
        return (self.secret.to_hex(), self.secret.to_bech32(), *self.config.secrets())


def open_answer(event: Event, trainer: SecretKey) -> Answer:
    """Check a 26920/27020 as wire.md §12 step 3 does and read it; AssertionError if it doesn't bind."""
    checked = sdk.Event.from_json(json.dumps(event.to_json()))
    assert checked.verify(), "an answer's id and signature hold"
    plaintext = sdk.nip44_decrypt(
        sdk.SecretKey.parse(trainer.to_hex()), sdk.PublicKey.parse(event.pubkey), event.content
    )
    return read_answer(plaintext)
