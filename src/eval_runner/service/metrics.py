"""What the runner is doing, for a scraper: Prometheus text on `/metrics`, and `/healthz`.

Both are served only where `EVAL_RUNNER_METRICS_LISTEN` says (HOST:PORT; unset, nowhere).

The pipeline records through `Metrics`, a protocol whose default (`NO_METRICS`) does nothing, so a pipeline
built without metrics (every test that does not ask for them) behaves exactly as before. `RunnerMetrics`
is what `serve` records into: a `CollectorRegistry` of its own (never prometheus-client's global one, so two
runners in one process never share counts), fed from the places that already define each fact once:

- a request answered is its usage record (`UsageKeeper.keep`): requests by outcome and code, refusals by
  code, runs and agent turns by outcome, and the time from arrival to the answer;
- suite slots in use and runs queued for one come from the pipeline's slot semaphore (`suite_slots`), run
  slots in use from the engine's `Started`/`Finished` events; in a fleet (`EVAL_RUNNER_DATABASE`) admitted
  runs wait in the database's queue instead, so `queued_runs` is that queue's depth (every runner's), read
  at each scrape in a thread (`refresh`), never on the event loop;
- the relay's state and `/healthz` follow the same proofs systemd's watchdog gets (`WatchedNotifier`): the
  subscription's `EOSE`, each answered probe, each renewal; a connection that ends makes it unhealthy at
  once, and a subscription not proven for two probe periods (the listener gives a connection up by then)
  is unhealthy too, so a stuck listener is caught as the watchdog would catch it;
- blob store errors by operation and code (`CountedBlobs`, around any `BlobStorage`).

No label holds a key, a token, an id or any text a sender wrote: every label value is a word from a fixed
vocabulary (`label`), and anything else is counted as `other`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Final, Literal, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import Enum as StateEnum
from prometheus_client.exposition import choose_encoder, generate_latest

from eval_runner.errors import EvalRunnerError
from eval_runner.service.blobs import BlobError, Upload
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.relay.liveness import Ended
from eval_runner.service.relay.notify import Notifier
from eval_runner.service.settings import Limits, MetricsListen, os_error_text
from eval_runner.service.usage import Record

PREFIX: Final = "eval_runner"
RELAY_STATES: Final = ("connecting", "subscribed", "reconnecting")
#: Actions that run a suite (a publish answers from the record and runs nothing).
RUN_ACTIONS: Final = frozenset({"run", "check", "validation"})
ACCEPTED_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RESULT_BUCKETS: Final = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
PROBE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
HEALTHY: Final = "ok: the requests subscription is proven\n"
UNHEALTHY: Final = "unhealthy: the requests subscription is not proven\n"
_WORD: Final = re.compile(r"[a-z][a-z_]{0,39}")
#: How long a scrape waits for the fleet's queue depth before it answers without it (NaN).
DEPTH_SECONDS: Final = 5.0

logger = logging.getLogger(__name__)


class MetricsError(EvalRunnerError):
    """The metrics endpoint could not start; `str()` is the operator's message."""


def label(value: str | None) -> str:
    """A label value from a fixed vocabulary: a lowercase word (outcomes, codes), `none` for no value, and
    `other` for anything else, so no key, id or text from a request can become a label."""
    if value is None or value == "":
        return "none"
    return value if _WORD.fullmatch(value) else "other"


def drop_reason(reason: str, *, verified: bool) -> str:
    """The class of a dropped event's reason (`DropError`), which names ids and tag values and so is never a
    label itself: not a request kind, not verified, not addressed to us, stale, a control without its
    target, or unreadable (it does not decrypt, or its body is not a request)."""
    if reason.startswith("kind "):
        return "kind"
    if not verified:
        return "unverified"
    if reason.startswith("the p tags"):
        return "not_addressed"
    if reason.startswith("stale"):
        return "stale"
    if reason.startswith("a control names"):
        return "control_target"
    return "unreadable"


class Metrics(Protocol):
    """What the pipeline records. Each call is cheap and never raises."""

    def dropped(self, reason: str, *, verified: bool) -> None: ...

    def answered(self, record: Record) -> None: ...

    def accepted(self, seconds: float) -> None: ...

    def suite_slots(self, jobs: int) -> asyncio.Semaphore: ...

    def turns_running(self, delta: int) -> None: ...


class NoMetrics:
    """Records nothing: the default wherever metrics were not asked for."""

    def dropped(self, reason: str, *, verified: bool) -> None:
        pass

    def answered(self, record: Record) -> None:
        pass

    def accepted(self, seconds: float) -> None:
        pass

    def suite_slots(self, jobs: int) -> asyncio.Semaphore:
        return asyncio.Semaphore(jobs)

    def turns_running(self, delta: int) -> None:
        pass


NO_METRICS: Final[Metrics] = NoMetrics()


class CountedSlots(asyncio.Semaphore):
    """The pipeline's suite slots, counting the runs waiting for one and the slots in use."""

    def __init__(self, jobs: int, waiting: Gauge | None, in_use: Gauge) -> None:
        super().__init__(jobs)
        self._waiting = waiting
        self._in_use = in_use

    async def acquire(self) -> Literal[True]:
        if self._waiting is None:  # a fleet: what waits is counted in the database's queue
            await super().acquire()
            self._in_use.inc()
            return True
        self._waiting.inc()
        try:
            await super().acquire()
        finally:
            self._waiting.dec()
        self._in_use.inc()  # no await between the slot and the count: a cancel cannot fall in between
        return True

    def release(self) -> None:
        self._in_use.dec()
        super().release()


class Health:
    """`/healthz`'s rule, which is the watchdog's: healthy from a proof of the subscription until its
    connection ends, and for at most `window` seconds after the last proof."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._proven_at: float | None = None
        self.subscribed = False

    def proven(self) -> None:
        self._proven_at = self._clock()
        self.subscribed = True

    def ended(self) -> None:
        self.subscribed = False

    def healthy(self) -> bool:
        proven = self._proven_at
        return self.subscribed and proven is not None and self._clock() - proven <= self.window


class WatchedNotifier(Notifier):
    """The systemd notifier, also telling `on_proof` each time the subscription is proven (`WATCHDOG=1`)."""

    __slots__ = ("_on_proof",)

    def __init__(self, notify_socket: str | None, on_proof: Callable[[], None]) -> None:
        super().__init__(notify_socket)
        self._on_proof = on_proof

    def watchdog(self) -> None:
        self._on_proof()
        super().watchdog()


class RunnerMetrics:
    """Every metric of one runner, in a registry of its own; implements `Metrics` and the relay's hooks.
    `queue_depth`, given in a fleet, reads the database queue's depth (blocking: it is called in a thread)."""

    def __init__(
        self,
        limits: Limits,
        *,
        probe: float,
        clock: Callable[[], float] = time.monotonic,
        queue_depth: Callable[[], int] | None = None,
    ) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self._queue_depth = queue_depth
        self._depth_read: asyncio.Future[int] | None = None
        self._depth_failed = False
        self.health = Health(2 * probe, clock)

        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"{PREFIX}_{name}", text, labels, registry=registry)

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", text, registry=registry)

        self.requests = counter(
            "requests", "requests answered (a usage record each), by outcome, code", ("outcome", "code")
        )
        self.refusals = counter("refusals", "execute requests refused, by code", ("code",))
        self.drops = counter("drops", "events dropped unanswered (not a request to us), by reason", ("reason",))
        self.runs = counter("runs", "suite runs ended, by outcome", ("outcome",))
        self.turns = counter("turns", "agent turns (tests x runs x 2) of the runs ended, by outcome", ("outcome",))
        self.suite_slots_total = gauge("suite_slots", "suites that may run at once (EVAL_RUNNER_JOBS)")
        self.suite_slots_in_use = gauge("suite_slots_in_use", "suites running now")
        self.run_slots_total = gauge("run_slots", "agent runs that may run at once (suites x EVAL_RUNNER_CONCURRENCY)")
        self.run_slots_in_use = gauge("run_slots_in_use", "agent runs (sandboxed turns and their grading) now")
        self.queued = gauge(
            "queued_runs",
            "admitted runs waiting for a suite slot"
            if queue_depth is None
            else "admitted runs waiting in the fleet's database queue (every runner's); NaN when it can't be read",
        )
        self.relay_state = StateEnum(
            f"{PREFIX}_relay_state",
            "the requests subscription: connecting (never proven yet), subscribed (proven), reconnecting",
            states=list(RELAY_STATES),
            registry=registry,
        )
        self.reconnects = counter("relay_reconnects", "relay connections that ended (each followed by a reconnect)")
        self.probe_round_trip = Histogram(
            f"{PREFIX}_relay_probe_round_trip_seconds",
            "liveness probe sent to its answer",
            buckets=PROBE_BUCKETS,
            registry=registry,
        )
        self.time_to_accepted = Histogram(
            f"{PREFIX}_time_to_accepted_seconds",
            "a run request's arrival to its accepted answer",
            buckets=ACCEPTED_BUCKETS,
            registry=registry,
        )
        self.time_to_result = Histogram(
            f"{PREFIX}_time_to_result_seconds",
            "a request's arrival to its result (a refusal, or a run's end), by outcome",
            ("outcome",),
            buckets=RESULT_BUCKETS,
            registry=registry,
        )
        self.blob_errors = counter(
            "blob_errors", "blob store operations that failed, by operation, code", ("operation", "code")
        )
        self.suite_slots_total.set(limits.jobs)
        self.run_slots_total.set(limits.jobs * limits.concurrency)
        self.relay_state.state("connecting")

    # -- the pipeline's side (Metrics) ---------------------------------------------------------------------

    def dropped(self, reason: str, *, verified: bool) -> None:
        self.drops.labels(drop_reason(reason, verified=verified)).inc()

    def answered(self, record: Record) -> None:
        outcome = label(record.outcome)
        self.requests.labels(outcome, label(record.code)).inc()
        if record.outcome == "refused":
            self.refusals.labels(label(record.code)).inc()
        elif record.action in RUN_ACTIONS:
            self.runs.labels(outcome).inc()
            self.turns.labels(outcome).inc(record.turns or 0)
        if record.total_ms is not None:
            self.time_to_result.labels(outcome).observe(record.total_ms / 1000)

    def accepted(self, seconds: float) -> None:
        self.time_to_accepted.observe(max(0.0, seconds))

    def suite_slots(self, jobs: int) -> asyncio.Semaphore:
        return CountedSlots(jobs, self.queued if self._queue_depth is None else None, self.suite_slots_in_use)

    def turns_running(self, delta: int) -> None:
        self.run_slots_in_use.inc(delta)

    # -- the relay's side ----------------------------------------------------------------------------------

    def notifier(self, notify_socket: str | None) -> Notifier:
        """The systemd notifier `serve` hands the listener, recording each proof of the subscription."""
        return WatchedNotifier(notify_socket, self._proven)

    def _proven(self) -> None:
        self.health.proven()
        self.relay_state.state("subscribed")

    def relay_ended(self, ended: Ended) -> None:
        """The listener's `on_end`: the connection is gone, and with it the proof."""
        del ended
        self.health.ended()
        self.reconnects.inc()
        self.relay_state.state("reconnecting")

    def probe_answered(self, seconds: float) -> None:
        """The listener's `on_probe`: a liveness probe's round trip."""
        self.probe_round_trip.observe(max(0.0, seconds))

    def blobs(self, store: BlobStorage) -> BlobStorage:
        """`store`, its failures counted."""
        return CountedBlobs(store, self.blob_errors)

    # -- what the endpoint serves --------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Before a scrape: read the fleet's queue depth in a thread (one read at a time, however many
        scrapes wait on it) into `queued_runs`; NaN when the database does not answer in `DEPTH_SECONDS`
        or fails. A lone runner's counts are always current, so there is nothing to read."""
        read = self._queue_depth
        if read is None:
            return
        if self._depth_read is None or self._depth_read.done():
            self._depth_read = asyncio.ensure_future(asyncio.to_thread(read))
            # A read that outlives its scrapes is still retrieved, so a late failure is not reported as lost.
            self._depth_read.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            depth = await asyncio.wait_for(asyncio.shield(self._depth_read), DEPTH_SECONDS)
        except (LedgerError, TimeoutError) as error:
            if not self._depth_failed:
                why = error.message if isinstance(error, LedgerError) else f"no answer in {DEPTH_SECONDS:g} s"
                logger.warning("metrics: the queue's depth can't be read: %s", why)
            self._depth_failed = True
            self.queued.set(float("nan"))
            return
        self._depth_failed = False
        self.queued.set(depth)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class CountedBlobs:
    """A `BlobStorage` whose `BlobError`s are counted by operation and code before they go on."""

    def __init__(self, store: BlobStorage, errors: Counter) -> None:
        self.store = store
        self._errors = errors

    async def fetch(self, digest: str) -> bytes:
        try:
            return await self.store.fetch(digest)
        except BlobError as error:
            self._errors.labels("fetch", label(error.code)).inc()
            raise

    async def has(self, digest: str) -> bool:
        return await self.store.has(digest)

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload:
        try:
            return await self.store.upload(data, media_type)
        except BlobError as error:
            self._errors.labels("upload", label(error.code)).inc()
            raise


def endpoint(metrics: RunnerMetrics) -> web.Application:
    """`GET /metrics` (Prometheus text) and `GET /healthz` (200 while the subscription is proven, else 503)."""

    async def scrape(request: web.Request) -> web.Response:
        await metrics.refresh()
        # The format the scraper asks for (Accept), as prometheus-client's own server chooses it.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        response = web.Response(body=encode(metrics.registry))
        response.headers["Content-Type"] = content_type
        return response

    async def healthz(_: web.Request) -> web.Response:
        if metrics.health.healthy():
            return web.Response(text=HEALTHY)
        return web.Response(status=503, text=UNHEALTHY)

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    return app


@contextlib.asynccontextmanager
async def serving(metrics: RunnerMetrics, listen: MetricsListen) -> AsyncIterator[str]:
    """The endpoint on `listen` until the block ends; yields its base URL (the port it got, for port 0) and
    logs `metrics <url>/metrics and /healthz`. Raises `MetricsError` when it cannot listen."""
    runner = web.AppRunner(endpoint(metrics), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, listen.host, listen.port)
        try:
            await site.start()
        except OSError as error:
            raise MetricsError(f"the metrics endpoint can't listen on {listen.url}: {os_error_text(error)}") from None
        host, port = runner.addresses[0][:2]
        url = MetricsListen(str(host), int(port)).url
        logger.info("metrics %s/metrics and /healthz", url)
        yield url
    finally:
        await runner.cleanup()
