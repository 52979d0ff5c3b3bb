"""`eval-runner serve`: the runner assembled from its parts, from the configuration to the listen loop.

In runner.md §3.1's order: the confinement probe (a host that cannot confine runs nothing: error
`unconfined_host: <why>`), the runner key, the catalog, the agent's digest and the question sets, the state
directory and its ledger (crash recovery happens as it opens: an interrupted run is answered `unknown` and
never run again), the embedded relay when `EVAL_RUNNER_RELAY` is unset, the startup lines on stderr, then
the answer publisher, the request pipeline with the engine behind it, and the requests listener, which
reconnects for ever with back-off.

Beyond the reference, and decisions where the spec is silent:

* **Embedded relay.** With `EVAL_RUNNER_RELAY` unset the runner serves nostr-sdk's `LocalRelay` itself on
  `EVAL_RUNNER_LISTEN` (default 127.0.0.1:7447; port 0 picks a free one), keeping its events in LMDB under
  `<state>/relay/`, with the default rate limit (60 events a minute per connection) raised so a run's
  progress notes are never refused. Its startup line is `relay   embedded at ws://HOST:PORT`. The runner
  key is then `<state>/runner-key`, generated (0600) on the first start, which says
  `generated the runner key in <path>` once; with an external relay a key file must exist. The relay
  starts after the ledger opens, so a second runner over the same state stops at the ledger's lock before
  touching the relay's files.
* **Catch-up.** Every (re)subscription asks from the newest request the ledger holds minus the 600 s open
  window (first start: now − 600), not the reference's now − 60, so a request published while the runner
  was down is still delivered by a relay that keeps it; the seen-set and the ledger make repeats harmless.
* **systemd.** `READY=1` once the first subscription is confirmed, `WATCHDOG=1` per confirmation and per
  answered probe, to `NOTIFY_SOCKET`.
* **Stopping.** SIGTERM or SIGINT stops listening at once (`stopping: …`); runs already admitted finish and
  send their results (the admission switch's rule: admitted runs finish). A second signal stops them too:
  they are cut off mid-run and a restart answers them `unknown`, as after a crash. Then `stopped`, exit 0.
  systemd's stop timeout (SIGKILL) bounds the wait like any crash would.
* Tool releases (§3.1 step 5) and coder defaults (step 6) are not taken yet; nothing is logged for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Final, TextIO

import nostr_sdk as sdk

from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.leftovers import sweep
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.testset.catalog import Catalog, CatalogError
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.config import Config, ConfigError, EmbeddedRelay, os_error_text
from eval_runner.service.keyfile import KeyFileError, ensure_key, load_key
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.relay.liveness import Liveness, RelayListener, catch_up_since, seconds_text
from eval_runner.service.relay.notify import Notifier
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.engine_suites import EngineSuiteRunner, QuestionsError, load_questions
from eval_runner.service.requests.pipeline import Pipeline

RELAY_DIR: Final = "relay"
#: The embedded relay's limits: REQs per connection, and events a minute per connection.
RELAY_MAX_REQS: Final = 500
RELAY_EVENTS_PER_MINUTE: Final = 60_000
STOPPING: Final = "stopping: no new requests; runs in flight finish first (signal again to stop them now)"
STOPPED: Final = "stopped"

Log = Callable[[str], None]


class ServeError(EvalRunnerError):
    """Why the runner could not start. `str()` is the operator's message (`eval-runner: <message>`)."""


def generated_line(path: Path) -> str:
    return f"generated the runner key in {path}"


def relay_line(config: Config, url: str) -> str:
    if isinstance(config.relay, EmbeddedRelay):
        return f"relay   embedded at {url}"
    return f"relay   {url}"


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
    config: Config, *, runner: str, relay_url: str, catalog: Catalog, agent_digest: str, confinement: Confinement
) -> list[str]:
    """The lines `serve` prints before it listens (runner.md §3.1 step 4)."""
    probe, renew = seconds_text(config.probe_ms / 1000), seconds_text(config.renew_ms / 1000)
    return [
        f"runner  {runner}",
        relay_line(config, relay_url),
        f"catalog {', '.join(tool.name for tool in catalog.tools)}",
        f"agent   {agent_digest}",
        f"sandbox {sandbox_text(confinement)}",
        f"limits  {config.limits.line()}",
        f"disk    {config.disk.line()}",
        f"usage   {config.usage_dir}",
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


def runner_key(config: Config, log: Log) -> SecretKey:
    """The runner key: generated in the state directory for the embedded relay when absent, else loaded."""
    try:
        if config.key_may_be_generated:
            key, generated = ensure_key(config.key_file)
            if generated:
                log(generated_line(config.key_file))
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
    log: Log,
    stop: asyncio.Event | None = None,
    hurry: asyncio.Event | None = None,
) -> None:
    """Run the runner until stopped. Raises `ServeError` when it cannot start.

    With `stop` None, SIGTERM and SIGINT stop it (see the module docstring); otherwise setting `stop` does,
    and setting `hurry` too cuts runs in flight off instead of waiting for them.
    """
    hurry = hurry if hurry is not None else asyncio.Event()
    if stop is None:
        stop = asyncio.Event()
        with _Signals(stop, hurry):
            await _serve(config, log, stop, hurry)
    else:
        await _serve(config, log, stop, hurry)


async def _serve(config: Config, log: Log, stop: asyncio.Event, hurry: asyncio.Event) -> None:
    confinement = await probe(config.temp_root)
    if isinstance(confinement, Unconfined):
        raise ServeError(f"unconfined_host: {confinement.reason}")
    if swept := await asyncio.to_thread(sweep, (config.temp_root,)):
        log(swept.line())
    secret = runner_key(config, log)
    runner = secret.public_key().to_hex()
    catalog = load_catalog(config)
    digest = agent_digest(config.coder)
    try:
        questions = load_questions(config.questions)
    except QuestionsError as error:
        raise ServeError(str(error)) from None
    open_state(config.state)
    try:
        ledger = await asyncio.to_thread(Ledger.open, ledger_path(config.state), runner, int(time.time()))
    except LedgerError as error:
        raise ServeError(error.message) from None
    with ledger:
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(config.relay, EmbeddedRelay):
                url = await stack.enter_async_context(embedded_relay(config.relay, config.state / RELAY_DIR))
            else:
                url = config.relay.url
            lines = startup_lines(
                config, runner=runner, relay_url=url, catalog=catalog, agent_digest=digest, confinement=confinement
            )
            for line in lines:
                log(line)
            liveness = Liveness(probe=config.probe_ms / 1000, renew=config.renew_ms / 1000)
            publisher = await stack.enter_async_context(Publisher(url, secret, probe=liveness.probe, log=log))
            suite_runner = EngineSuiteRunner(
                config, confinement=confinement, questions=questions, extra_secrets=(secret.to_hex(),)
            )
            pipeline = Pipeline.from_config(
                config,
                secret=secret,
                ledger=ledger,
                catalog=catalog,
                suite_runner=suite_runner,
                publisher=publisher,
                log=log,
            )
            notifier = Notifier(config.notify_socket)
            stack.callback(notifier.close)
            await _listen(url, secret, ledger, pipeline, notifier, liveness, log, stop, hurry)


async def _listen(
    url: str,
    secret: SecretKey,
    ledger: Ledger,
    pipeline: Pipeline,
    notifier: Notifier,
    liveness: Liveness,
    log: Log,
    stop: asyncio.Event,
    hurry: asyncio.Event,
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

    listener = RelayListener(url, secret, deliver=deliver, since=since, log=log, notifier=notifier, liveness=liveness)
    listening = asyncio.get_running_loop().create_task(listener.run_forever())
    stopped = asyncio.get_running_loop().create_task(stop.wait())
    try:
        await asyncio.wait({listening, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if listening.done():
            listening.result()  # the loop ends only when stopped: anything else is a bug, raised here
        log(STOPPING)
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
    log(STOPPED)


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


def serve_main(argv: list[str], *, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """`eval-runner serve`: 0 after a stop by signal, 1 with `eval-runner: <error>` when it cannot start.
    Arguments are ignored, as the reference ignores them. Log lines go to `stderr`, one each, flushed."""
    del argv, stdout

    def log(line: str) -> None:
        stderr.write(line + "\n")
        stderr.flush()

    try:
        config = Config.from_env(environ)
        asyncio.run(serve(config, log=log))
    except (ConfigError, ServeError) as error:
        log(f"eval-runner: {error}")
        return 1
    return 0
