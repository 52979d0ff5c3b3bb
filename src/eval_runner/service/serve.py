"""`eval-runner serve`: the runner assembled from its parts, from the configuration to the listen loop.

In runner.md §3.1's order: the confinement probe (a host that cannot confine runs nothing), the runner key,
the catalog, the agent, the state directory and its ledger (crash recovery happens as it opens), the
embedded relay when `EVAL_RUNNER_RELAY` is unset, the startup lines, the runner's catalog tool releases, then
the answer publisher, the request pipeline and the requests listener. Log lines go to the `eval_runner`
loggers; SIGTERM stops it gently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from pathlib import Path
from typing import Final, TextIO

import nostr_sdk as sdk

from eval_runner.contracts.coder_defaults import DEFAULT_ROOT
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.leftovers import sweep
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.testset.catalog import Catalog, CatalogError
from eval_runner.engine.testset.skills import PROGRAM_AGENT
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.blobs import AuthScheme, BlobServer, BlobStore
from eval_runner.service.blobs.bucket import BlobStorage, BucketStore
from eval_runner.service.config import Config, ConfigError
from eval_runner.service.fleet import lease_kept
from eval_runner.service.keyfile import KeyFileError, ensure_key, load_key
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.postgres import PostgresLedger, open_ledger
from eval_runner.service.ledger.store import Ledger
from eval_runner.service.metrics import MetricsError, RunnerMetrics, serving
from eval_runner.service.relay.connection import CHALLENGE_WAIT, RelayClient
from eval_runner.service.relay.liveness import Liveness, RelayListener, catch_up_since, seconds_text
from eval_runner.service.relay.notify import Notifier
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.releases.defaults import DefaultsReader
from eval_runner.service.releases.publish import ReleaseError
from eval_runner.service.releases.tools import ToolReleases
from eval_runner.service.requests.pipeline import Pipeline
from eval_runner.service.requests.suites import EngineSuiteRunner, QuestionsError, load_questions
from eval_runner.service.settings import EmbeddedBlobs, EmbeddedRelay, os_error_text

RELAY_DIR: Final = "relay"
BLOBS_DIR: Final = "blobs"
#: The embedded relay's limits: REQs per connection, and events a minute per connection.
RELAY_MAX_REQS: Final = 500
RELAY_EVENTS_PER_MINUTE: Final = 60_000
STOPPING: Final = "stopping: no new requests; runs in flight finish first (signal again to stop them now)"
STOPPED: Final = "stopped"

logger = logging.getLogger(__name__)


class ServeError(EvalRunnerError):
    """Why the runner could not start. `str()` is the operator's message (`eval-runner: <message>`)."""


def generated_line(path: Path) -> str:
    return f"generated the runner key in {path}"


def relay_line(config: Config, url: str) -> str:
    if isinstance(config.relay, EmbeddedRelay):
        return f"relay   embedded at {url}"
    return f"relay   {url}"


def blobs_text(config: Config, url: str | None = None) -> str:
    """Where suite and tool files are kept, as the `blobs` lines of `serve` and `check` say it: the bucket,
    else the Blossom server, `embedded at` when it is this runner's own (`url` once it listens)."""
    blobs = config.blobs
    if isinstance(blobs, EmbeddedBlobs):
        return f"embedded at {url or blobs.url}"
    if config.bucket is not None:
        return f"{config.bucket.url}, read at {blobs.base}"
    return blobs.base


@contextlib.asynccontextmanager
async def blob_storage(config: Config, secret: SecretKey) -> AsyncIterator[tuple[BlobStorage, str]]:
    """The blob store suite and tool files go to and come from, and the base it is named by: the embedded
    Blossom server (started here, only the runner may upload), a Blossom server elsewhere, or a bucket."""
    blobs = config.blobs
    if isinstance(blobs, EmbeddedBlobs):
        server = BlobServer(config.state / BLOBS_DIR, [secret.public_key().to_hex()], host=blobs.host, port=blobs.port)
        try:
            await server.start()
        except OSError as error:
            raise ServeError(f"the embedded blob server can't listen on {blobs.url}: {os_error_text(error)}") from None
        try:
            async with BlobStore([server.url], server.url, secret) as store:
                yield store, server.url
        finally:
            await server.close()
        return
    auth = AuthScheme(blobs.auth)
    if config.bucket is not None:
        async with BlobStore([blobs.base]) as reads:
            yield (
                BucketStore(reads, config.bucket.url, config.bucket.gcloud_config, temp_root=config.temp_root),
                blobs.base,
            )
        return
    async with BlobStore([blobs.base], blobs.base, secret, auth=auth) as store:
        yield store, blobs.base


def sandbox_text(confinement: Confinement) -> str:
    """What every run's sandbox is on this host: the backend, the syscall filter and who counts memory."""
    seccomp = "a seccomp filter" if confinement.seccomp is not None else "no seccomp filter (libseccomp missing)"
    memory = (
        "memory counted by a " + confinement.cgroups.describe()
        if confinement.cgroups is not None
        else "memory counted by the runner (no memory cgroup for it here)"
    )
    return f"{confinement.bwrap}; {seccomp}; {memory}"


def startup_lines(
    config: Config,
    *,
    runner: str,
    relay_url: str,
    blobs_url: str | None = None,
    catalog: Catalog,
    agent_digest: str,
    confinement: Confinement,
) -> list[str]:
    """The lines `serve` prints before it listens (runner.md §3.1 step 4, with `blobs` after `relay`)."""
    probe, renew = seconds_text(config.probe_ms / 1000), seconds_text(config.renew_ms / 1000)
    kind = PROGRAM_AGENT if config.agent is None else config.agent.kind.value
    has_programs = any(tool.subject.programs for tool in catalog.tools)
    # Only coder runs an extension's programs (Wasm guests): another agent gets the skills only.
    left_out = [f"agent   {kind}: extensions' programs are not run (skills only)"]
    return [
        f"runner  {runner}",
        relay_line(config, relay_url),
        f"blobs   {blobs_text(config, blobs_url)}",
        f"catalog {', '.join(tool.name for tool in catalog.tools)}",
        f"agent   {agent_digest}",
        *(left_out if kind != PROGRAM_AGENT and has_programs else []),
        f"sandbox {sandbox_text(confinement)}",
        f"limits  {config.limits.line()}",
        f"disk    {config.disk.line()}",
        f"usage   {'the ledger database (every runner of the fleet)' if config.database else config.usage_dir}",
        f"liveness a probe every {probe} s; the subscription is renewed every {renew} s",
    ]


def load_catalog(config: Config) -> Catalog:
    try:
        return Catalog.load(config.catalog)
    except CatalogError as error:
        raise ServeError(str(error)) from None


def agent_digest(coder: Path) -> str:
    """`sha256:<hex>` of the agent binary both arms run."""
    try:
        return digest_bytes(coder.read_bytes())
    except OSError as error:
        raise ServeError(f"EVAL_RUNNER_CODER {coder}: {os_error_text(error)}") from None


def runner_key(config: Config) -> SecretKey:
    """The runner key: generated in the state directory for the embedded relay when absent, else loaded."""
    try:
        if config.key_may_be_generated:
            key, generated = ensure_key(config.key_file)
            if generated:
                logger.info(generated_line(config.key_file))
            return key
        return load_key(config.key_file)
    except KeyFileError as error:
        raise ServeError(str(error)) from None


def open_state(state: Path) -> None:
    """The state directory, made if absent and kept owner-only (runner.md §6 step 3)."""
    try:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(state, 0o700)
    except OSError as error:
        raise ServeError(f"EVAL_RUNNER_STATE {state}: {os_error_text(error)}") from None


@contextlib.asynccontextmanager
async def embedded_relay(relay: EmbeddedRelay, store: Path) -> AsyncIterator[str]:
    """nostr-sdk's LocalRelay on `relay`'s address, its events kept in LMDB at `store`; yields its URL."""
    # The LMDB store is reached through nostr-sdk's Python trait bridge, which runs on this loop.
    sdk.uniffi_set_event_loop(asyncio.get_running_loop())
    try:
        store.mkdir(mode=0o700, parents=True, exist_ok=True)
        database = await sdk.NostrLmdb.open(str(store))
    except (OSError, sdk.NostrSdkError) as error:
        raise ServeError(f"the embedded relay's store {store}: {error}") from None
    builder = (
        sdk.LocalRelayBuilder()
        .addr(relay.host)
        .rate_limit(sdk.RateLimit(max_reqs=RELAY_MAX_REQS, notes_per_minute=RELAY_EVENTS_PER_MINUTE))
        .database(database)
    )
    if relay.port:  # with port 0 the relay picks one, and its url() names it (port(0) would not)
        builder = builder.port(relay.port)
    try:
        local = builder.build()
        await local.run()
        url = str(await local.url())
    except sdk.NostrSdkError as error:
        raise ServeError(f"the embedded relay can't listen on {relay.url}: {error}") from None
    try:
        yield url
    finally:
        local.shutdown()


class _Signals:
    """SIGTERM/SIGINT: the first sets `stop`, the next sets `hurry`."""

    def __init__(self, stop: asyncio.Event, hurry: asyncio.Event) -> None:
        self.stop = stop
        self.hurry = hurry
        self.loop = asyncio.get_running_loop()

    def __enter__(self) -> _Signals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, self._signalled)
        return self

    def __exit__(self, *_: object) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.remove_signal_handler(signum)

    def _signalled(self) -> None:
        if self.stop.is_set():
            self.hurry.set()
        self.stop.set()


async def serve(
    config: Config,
    *,
    stop: asyncio.Event | None = None,
    hurry: asyncio.Event | None = None,
) -> None:
    """Run the runner until stopped. Raises `ServeError` when it cannot start.

    With `stop` None, the first SIGTERM or SIGINT stops listening and lets admitted runs finish, a second
    cuts them off; otherwise setting `stop` does, and setting `hurry` too cuts runs in flight off instead
    of waiting for them. Log lines go to the `eval_runner` loggers.
    """
    hurry = hurry if hurry is not None else asyncio.Event()
    if stop is None:
        stop = asyncio.Event()
        with _Signals(stop, hurry):
            await _serve(config, stop, hurry)
    else:
        await _serve(config, stop, hurry)


async def _serve(config: Config, stop: asyncio.Event, hurry: asyncio.Event) -> None:
    confinement = await probe(config.temp_root)
    if isinstance(confinement, Unconfined):
        raise ServeError(f"unconfined_host: {confinement.reason}")
    if swept := await asyncio.to_thread(sweep, (config.temp_root,)):
        logger.info(swept.line())
    secret = runner_key(config)
    runner = secret.public_key().to_hex()
    catalog = load_catalog(config)
    digest = agent_digest(config.coder)
    try:
        questions = load_questions(config.questions)
    except QuestionsError as error:
        raise ServeError(str(error)) from None
    open_state(config.state)
    try:
        database = None if config.database is None else config.database.expose()
        now = int(time.time())
        ledger = await asyncio.to_thread(open_ledger, database, config.state, runner, now, lease_ms=config.lease_ms)
    except LedgerError as error:
        raise ServeError(error.message) from None
    with ledger:
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(config.relay, EmbeddedRelay):
                url = await stack.enter_async_context(embedded_relay(config.relay, config.state / RELAY_DIR))
            else:
                url = config.relay.url
            blobs, blobs_url = await stack.enter_async_context(blob_storage(config, secret))
            lines = startup_lines(
                config,
                runner=runner,
                relay_url=url,
                blobs_url=blobs_url,
                catalog=catalog,
                agent_digest=digest,
                confinement=confinement,
            )
            for line in lines:
                logger.info(line)
            metrics = RunnerMetrics(
                config.limits,
                probe=config.probe_ms / 1000,
                queue_depth=ledger.queue_depth if isinstance(ledger, PostgresLedger) else None,  # a fleet's queue
            )
            if config.metrics_listen is not None:
                await stack.enter_async_context(serving(metrics, config.metrics_listen))
            blobs = metrics.blobs(blobs)
            # The embedded relay (nostr-sdk's LocalRelay) challenges only at a REQ, never first: waiting for a first
            # challenge on each one-shot query (releases, published results) would only add its 0.25 s.
            first_challenge = 0.0 if isinstance(config.relay, EmbeddedRelay) else CHALLENGE_WAIT
            relay = RelayClient(url, secret, challenge_wait=first_challenge)
            tool_releases = ToolReleases(secret=secret, blobs=blobs, relay=relay)
            await release_tools(tool_releases, catalog)
            defaults = DefaultsReader(
                relay=relay,
                root=config.defaults_root or DEFAULT_ROOT,
                documents=config.defaults_documents,
                catalog=catalog,
                releases=tool_releases.known,
            )
            await defaults.read()  # the `defaults …` line at start
            liveness = Liveness(probe=config.probe_ms / 1000, renew=config.renew_ms / 1000)
            publisher = await stack.enter_async_context(Publisher(url, secret, probe=liveness.probe))
            suite_runner = EngineSuiteRunner(
                config,
                confinement=confinement,
                questions=questions,
                extra_secrets=(secret.to_hex(),),
                metrics=metrics,
            )
            pipeline = Pipeline.from_config(
                config,
                secret=secret,
                ledger=ledger,
                catalog=catalog,
                suite_runner=suite_runner,
                publisher=publisher,
                blobs=blobs,
                relay=relay,
                tool_release=tool_releases.release,
                defaults=defaults.for_run,
                metrics=metrics,
            )
            stack.callback(pipeline.usage.close)  # a fleet's usage lines still on their way to the database
            if isinstance(ledger, PostgresLedger):  # a fleet's runner (service/fleet.py)
                logger.info("ledger  shared in PostgreSQL, lease %d ms", config.lease_ms)
                await stack.enter_async_context(lease_kept(ledger, pipeline.answers, pipeline.stops, stop, hurry))
            if pipeline.queue is not None:  # admitted runs wait in the fleet's queue; take them while slots are free
                pipeline.queue.start(stop)
            notifier = metrics.notifier(config.notify_socket)
            stack.callback(notifier.close)
            await _listen(url, secret, ledger, pipeline, notifier, liveness, stop, hurry, metrics)


async def release_tools(releases: ToolReleases, catalog: Catalog) -> None:
    """Release every catalog tool this runner publishes (runner.md §3.1 step 5): a `tool` line each when all
    succeed, else only `tools   not released: <why>` (admission then tries again when a run names one)."""
    try:
        released = await releases.release_catalog(catalog.tools)
    except ReleaseError as error:
        logger.warning("tools   not released: %s", error)
        return
    for tool, found in released:
        logger.info("tool    %s released as %s", tool.name, found.event.id)


async def _listen(
    url: str,
    secret: SecretKey,
    ledger: Ledger,
    pipeline: Pipeline,
    notifier: Notifier,
    liveness: Liveness,
    stop: asyncio.Event,
    hurry: asyncio.Event,
    metrics: RunnerMetrics | None = None,
) -> None:
    """Listen until `stop`; then let what was delivered and admitted finish (unless `hurry`), and close."""
    handling: set[asyncio.Future[None]] = set()

    async def deliver(event: Event) -> None:
        # Tracked here so a stop waits for a request already handed over, not only for admitted runs.
        # Shielded: a delivery task cancelled under it leaves the handling to finish, and the drain waits for it.
        handled = asyncio.ensure_future(pipeline.handle(event))
        handling.add(handled)
        handled.add_done_callback(handling.discard)
        await asyncio.shield(handled)

    def since() -> int:
        # One aggregate over this key's claims, read under the ledger's lock (held only for a commit's length).
        return catch_up_since(int(time.time()), ledger.newest_request_created_at())

    listener = RelayListener(
        url,
        secret,
        deliver=deliver,
        since=since,
        notifier=notifier,
        liveness=liveness,
        on_end=None if metrics is None else metrics.relay_ended,
        on_probe=None if metrics is None else metrics.probe_answered,
    )
    listening = asyncio.get_running_loop().create_task(listener.run_forever())
    stopped = asyncio.get_running_loop().create_task(stop.wait())
    try:
        await asyncio.wait({listening, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if listening.done():
            listening.result()  # the loop ends only when stopped: anything else is a bug, raised here
        logger.info(STOPPING)
        listener.stop()
        await listening
        await _unless(_drain(handling, pipeline), hurry)
    finally:
        stopped.cancel()
        listener.stop()
        if not listening.done():
            listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        for handled in list(handling):
            handled.cancel()
        await asyncio.gather(*handling, return_exceptions=True)
        await pipeline.aclose()
    logger.info(STOPPED)


async def _drain(handling: set[asyncio.Future[None]], pipeline: Pipeline) -> None:
    """Until every request handed over is handled and every admitted run has sent its result."""
    while handling:
        await asyncio.gather(*list(handling), return_exceptions=True)
    await pipeline.wait_idle()


async def _unless(work: Awaitable[None], hurry: asyncio.Event) -> None:
    """Await `work`, or stop waiting for it (cancelling it) once `hurry` is set."""
    doing = asyncio.ensure_future(work)
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        await asyncio.wait({doing, hurried}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (doing, hurried):
            task.cancel()
        await asyncio.gather(doing, hurried, return_exceptions=True)


# --- the command ----------------------------------------------------------------------------------------


def serve_main(*, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """`eval-runner serve` (it takes no arguments): 0 after a stop by signal, 1 with `eval-runner: <error>`
    (one line per problem) when it cannot start. Log lines go to the `eval_runner` loggers; the command line
    sends them to stderr (`eval_runner.logs.lines_to_stream`)."""
    del stdout
    try:
        config = Config.from_env(environ)
        asyncio.run(serve(config))
    except ConfigError as error:
        stderr.write("".join(f"eval-runner: {problem}\n" for problem in error.problems))
        stderr.flush()
        return 1
    except (ServeError, MetricsError) as error:
        stderr.write(f"eval-runner: {error}\n")
        stderr.flush()
        return 1
    return 0
