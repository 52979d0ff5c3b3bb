"""The service on loopback, side by side in one run: `uv run python bench/service.py`.

Figures and their targets (the issue's): the relay's bare echo p50 (no runner: the floor everything else
stands on); the refusal round trip p50/p95 (≤ 2 ms, and ≤ 10× the echo); the accepted latency p50
(≤ 20 ms); a flood of 2,000 refusable requests (≥ 1,000 answered/s, 0 unanswered); the service's idle RSS.

Set-up. One nostr-sdk LocalRelay in this process (rate limits raised). The service runs in a subprocess
(this script with `--serve`), so its RSS and CPU time are its own: the ledger, quota and usage log in a temp
state directory, `Pipeline.from_config`, the answer `Publisher`, and `service.serve`'s own listen loop (the
requests listener with the ledger's catch-up, deliveries tracked and drained), with a stand-in suite runner
that holds every admitted run until it is cancelled (the engine is not what is measured here). The trainer
is a raw websockets client in this process: every request is built (`trainer_request`), sealed and signed
before the clock starts; a figure is the time from sending the EVENT frame to receiving the answer, read
only as far as its kind and `e` tag; answers of each kind are opened and checked after the clock.

* echo: an ephemeral event (kind 20001) published and received back on the trainer's own subscription;
* refusal: a request for 4 runs per arm, refused `too_large` as the input is read; beside it, a draft case
  asking for `exec`, refused `not_admitted` after the suite is written out and loaded (planning);
* accepted: an admissible catalog-tool run, until its `27020 accepted`; then a cancel control, and the
  `cancelled` result is awaited before the next sample, so runs never overlap;
* publish: a run of the same draft with 2 runs per arm, which the stand-in finishes at once with the engine's
  own report and results directory (every attempt unknown), is awaited; then its publish request, until the
  result with both pointers (the draft test set released to the embedded blob server and the relay, the
  report rewritten, the `3189` signed, recorded, published and read back). Each sample publishes a fresh run;
  the test set's release is the same each time, so after the first it is reused;
* flood: 2,000 refusable requests sent back to back without waiting for the relay's OKs, then 2,000 more
  sent as fast as no more than 500 are unanswered; answered/s is answers received over the time from the
  first send to the last answer, unanswered is counted 30 s on. Beside each, the same flood as the service
  saw it (its usage records: arrival and answer times) and the CPU time it spent (/proc);
* idle RSS: the service subprocess's VmRSS after warm-up, nothing in flight (VmHWM after the floods too).

Two things of the relay's, not the runner's, are kept out of the figures. LocalRelay does not set
TCP_NODELAY, so its second message in a row waits for the ACK of the first, which Linux delays up to 40 ms:
the trainer acks at once (TCP_QUICKACK, re-armed after every read); without it every figure here is ~44 ms.
And a relay serves each connection's messages in turn, so the trainer publishes on one connection and
reads its answers on another, or its own flood would hold its answers back. `BENCH_PROFILE=<path>` runs the
service under cProfile and keeps its stats there.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nostr_sdk as sdk
from websockets.asyncio.client import ClientConnection, connect

from eval_runner.contracts.answers import Answer, ResultBody, read_answer
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import EXECUTION_SCHEMA, ExecuteBody
from eval_runner.contracts.hosted import PublishInput, RunInput, request_tags
from eval_runner.contracts.outputs import Headline, PublishOutput, RunOutput
from eval_runner.contracts.report_documents import AgentPin
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes
from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.inputs import ReportInputs, RunSetup
from eval_runner.engine.report.results_dir import suite_files, write_results
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.logs import lines_to
from eval_runner.nostr import ClientEvent, Event, PublicKey, SecretKey, conversation_key, decrypt, encode, encrypt, sign
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.config import Config
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.relay.liveness import SUBSCRIBED, Liveness
from eval_runner.service.relay.notify import Notifier
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.admission import RunPlan
from eval_runner.service.requests.pipeline import Pipeline, Progress, SuiteError, SuiteResult
from eval_runner.service.serve import _listen as serve_listen
from eval_runner.service.usage import read as read_usage
from eval_runner.trainer.requests import build_request, extension_tool, run_input, suite_draft

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "codebase-brief"
REQUEST_KIND, RESULT_KIND, FEEDBACK_KIND, ECHO_KIND = 25_920, 26_920, 27_020, 20_001
BOUND = 30.0
WARM_ECHOES, ECHOES = 50, 500
WARM_REFUSALS, REFUSALS, PLANNED_REFUSALS = 50, 500, 100
WARM_ACCEPTS, ACCEPTS = 3, 50
WARM_PUBLISHES, PUBLISHES, PUBLISHED_RUNS = 2, 20, 2
FLOOD = 2_000
WINDOW = 500
REFUSAL_P50_MS, ECHO_FACTOR, ACCEPTED_P50_MS, FLOOD_RATE = 2.0, 10.0, 20.0, 1_000.0


# -- the service (the subprocess) -------------------------------------------------------------------


class StandInSuite:
    """Holds every admitted run until it is cancelled, except a run of `PUBLISHED_RUNS` per arm, which it finishes
    at once with the engine's own report and results (no attempt made): the bench measures the service."""

    async def run(self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path) -> SuiteResult:
        if plan.runs == PUBLISHED_RUNS:
            return await asyncio.to_thread(finished, plan, results_base)
        await cancel.wait()
        raise SuiteError("the bench cancelled this run")


def finished(plan: RunPlan, results_base: Path) -> SuiteResult:
    """The results directory a run leaves, built by the engine's report builder for the plan (blocking)."""
    authorship, now = plan.authorship, int(time.time())
    built = build_report(
        ReportInputs(
            suite=plan.suite,
            subject=plan.subject,
            agent=AgentPin(digest=digest_bytes(b"bench coder"), size=11),
            attempts=(),
            gate_file=gate_file(),
            author=authorship.author,
            package=authorship.package,
            component=authorship.component,
            evaluator=authorship.evaluator,
            started_at=now,
            ended_at=now,
            setup=RunSetup(runs=plan.runs),
            subject_definition=None if plan.tool is None else plan.tool.record,
            subject_release=plan.subject.definition.event,
            suite_release=authorship.suite_release,
            requester=authorship.requester,
        )
    )
    directory = write_results(results_base, built, (), suite_files(plan.suite))
    found = built.report.ext_eval.headline
    return SuiteResult(
        report=built.report_bytes,
        report_ref=built.report_ref,
        headline=Headline(found.subject_passed, found.baseline_passed, found.total),
        verdict=built.verdict.value,
        results=directory,
    )


async def serve(url: str, root: Path, secret: SecretKey) -> None:
    """The runner's service over `url` until stdin closes; prints `ready` once subscribed."""
    subscribed = asyncio.Event()

    def log(line: str) -> None:  # as serve_main logs: one line to stderr, flushed
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if line == SUBSCRIBED:
            subscribed.set()

    with lines_to(log):
        await _serve(url, root, secret, subscribed)


async def _serve(url: str, root: Path, secret: SecretKey, subscribed: asyncio.Event) -> None:
    config = Config.from_env(
        {
            "EVAL_RUNNER_RELAY": url,
            "EVAL_RUNNER_CATALOG": str(EXAMPLE),
            "EVAL_RUNNER_CODER": "/usr/bin/true",
            "CODER_DOOR_KEY": "bench-door-key",
            "EVAL_RUNNER_STATE": str(root / "state"),
            "EVAL_RUNNER_TMP": str(root / "tmp"),
            "HOME": str(root),
        }
    )
    config.state.mkdir(mode=0o700)
    config.temp_root.mkdir()
    stop = asyncio.Event()
    liveness = Liveness(probe=config.probe_ms / 1000, renew=config.renew_ms / 1000)
    runner = secret.public_key().to_hex()
    with Ledger.open(ledger_path(config.state), runner, int(time.time())) as ledger:
        async with (
            Publisher(url, secret, probe=liveness.probe) as publisher,
            BlobServer(root / "blobs", [runner]) as blob_server,
            BlobStore([blob_server.url], blob_server.url, secret) as blobs,
        ):
            pipeline = Pipeline.from_config(
                config,
                secret=secret,
                ledger=ledger,
                catalog=Catalog.load(config.catalog),
                suite_runner=StandInSuite(),
                publisher=publisher,
                blobs=blobs,
                relay=RelayClient(url, secret, challenge_wait=0.0),  # as serve does for its embedded relay
            )
            # serve's own listen loop: the listener with the ledger's catch-up, deliveries tracked and drained
            listening = asyncio.create_task(
                serve_listen(url, secret, ledger, pipeline, Notifier(None), liveness, stop, asyncio.Event())
            )
            await asyncio.wait_for(subscribed.wait(), BOUND)
            print("ready", flush=True)
            await asyncio.to_thread(sys.stdin.read)  # until the bench closes our stdin
            stop.set()
            await listening


# -- the trainer (this process) ---------------------------------------------------------------------


@dataclass
class Trainer:
    """A trainer on raw websockets: it publishes on one connection and reads its answers on another (a relay
    serves each connection in turn, so a flood of its own EVENTs would hold back the answers on the same
    one), and timestamps every answer as it arrives."""

    out: ClientConnection
    into: ClientConnection
    runner: str
    secret: SecretKey = field(default_factory=SecretKey.generate)
    arrived: dict[tuple[int, str], float] = field(default_factory=dict)
    kept: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    refused_oks: list[str] = field(default_factory=list)
    counting: Callable[[], None] | None = None
    _waiting: dict[tuple[int, str], asyncio.Future[float]] = field(default_factory=dict)
    _eose: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    @property
    def pubkey(self) -> str:
        return self.secret.public_key().to_hex()

    async def subscribe(self) -> None:
        answers = {"kinds": [RESULT_KIND, FEEDBACK_KIND], "#p": [self.pubkey]}
        echo = {"kinds": [ECHO_KIND], "authors": [self.pubkey]}
        await self.into.send(json.dumps(["REQ", "answers", answers]))
        await self.into.send(json.dumps(["REQ", "echo", echo]))
        for _ in range(2):
            await asyncio.wait_for(self._eose.get(), BOUND)

    async def read(self, ws: ClientConnection) -> None:
        sock = ws.transport.get_extra_info("socket")
        async for message in ws:
            now = time.perf_counter()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)  # Linux clears it: re-armed per read
            frame = json.loads(message)
            if frame[0] == "EVENT":
                self._arrive(frame[2], now)
            elif frame[0] == "EOSE":
                self._eose.put_nowait(frame[1])
            elif frame[0] == "OK" and not frame[2]:
                self.refused_oks.append(frame[3])

    def _arrive(self, event: dict[str, Any], now: float) -> None:
        if event["kind"] == ECHO_KIND:
            key = (ECHO_KIND, event["id"])
        else:
            key = (event["kind"], next((tag[1] for tag in event["tags"] if tag[0] == "e"), ""))
        if key in self.arrived:
            return
        self.arrived[key] = now
        self.kept[key] = event
        waiting = self._waiting.pop(key, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(now)
        if key[0] == RESULT_KIND and self.counting is not None:
            self.counting()

    async def round_trip(self, event: Event, kind: int, about: str | None = None) -> float:
        """Seconds from sending `event` to the first answer of `kind` naming it (or `about`)."""
        key = (kind, about or event.id)
        waiting: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[key] = waiting
        text = encode(ClientEvent(event))
        started = time.perf_counter()
        await self.out.send(text)
        return await asyncio.wait_for(waiting, BOUND) - started

    def open(self, kind: int, about: str) -> Answer:
        """The answer kept for (`kind`, `about`), its signature and decryption checked by nostr-sdk."""
        event = self.kept[(kind, about)]
        checked = sdk.Event.from_json(json.dumps(event))
        if not checked.verify() or event["pubkey"] != self.runner:
            raise AssertionError("an answer that doesn't bind")
        key = conversation_key(self.secret, PublicKey.parse(self.runner))
        return read_answer(decrypt(event["content"], key))


class Requests:
    """Sealed, signed requests to one runner, built before any clock starts."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        tool = extension_tool(EXAMPLE)
        assert tool.evals is not None
        drafted = suite_draft(tool.evals, tool.draft_tool()).draft
        self.admissible = run_input(drafted, subject=tool.definition)
        self.key = conversation_key(trainer.secret, PublicKey.parse(trainer.runner))

    def seal(self, body: JsonValue, tags: list[list[str]]) -> Event:
        content = encrypt(canonical(body).decode("utf-8"), self.key, max_len=262_144)
        return sign(self.trainer.secret, REQUEST_KIND, tags, content, int(time.time()))

    def execute(self, value: RunInput | JsonValue, *, checked: bool = True) -> tuple[Event, ExecuteBody]:
        body = build_request(self.trainer.runner, value, checked=checked)
        return self.seal(body.to_json(), request_tags(self.trainer.runner, body.deadline)), body

    def too_large(self) -> Event:
        value = self.admissible.to_json()
        value["runs"] = 4
        return self.execute(value, checked=False)[0]

    def asks_exec(self) -> Event:
        value = self.admissible.to_json()
        prompt = '+++\nv = "openagents.eval-case.v1"\n\n[run]\nallowed_operations = ["read", "exec"]\n+++\n\nList.\n'
        grader = '+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nfiles\n'
        case = {"id": "shell", "kind": "should-fire", "prompt": prompt, "graders": [{"name": "listed", "text": grader}]}
        value["draft"]["cases"] = [*value["draft"]["cases"], case]
        return self.execute(value, checked=False)[0]

    def finishing(self) -> Event:
        """A run of the admissible draft that the stand-in suite finishes at once."""
        value = self.admissible.to_json()
        value["runs"] = PUBLISHED_RUNS
        return self.execute(value)[0]

    def cancel(self, target: Event, body: ExecuteBody) -> Event:
        control: dict[str, JsonValue] = {
            "v": EXECUTION_SCHEMA,
            "requires": [],
            "type": "cancel",
            **body.binding.to_json(),
            "reason": "bench",
        }
        return self.seal(control, [["p", self.trainer.runner], ["e", target.id]])

    def echo(self, index: int) -> Event:
        return sign(self.trainer.secret, ECHO_KIND, [], f"echo {index}", int(time.time()))


# -- measuring ----------------------------------------------------------------------------------------


def ms(seconds: list[float], share: float) -> float:
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int, field_name: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for {pid}")


@dataclass
class Flood:
    """One flood of refusable requests: as the trainer saw it, and as the service did."""

    name: str
    window: int | None
    ids: set[str] = field(default_factory=set)
    rate: float = 0.0
    unanswered: int = 0
    sent_s: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    service_answered: int = 0
    service_rate: float = 0.0


@dataclass
class Figures:
    service_pid: int
    echo: list[float] = field(default_factory=list)
    refusal: list[float] = field(default_factory=list)
    planned: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    published: list[float] = field(default_factory=list)
    floods: list[Flood] = field(default_factory=list)
    idle_rss_kib: int = 0
    peak_rss_kib: int = 0
    checks: list[str] = field(default_factory=list)


async def accept_once(trainer: Trainer, requests: Requests) -> float:
    event, body = requests.execute(requests.admissible)
    took = await trainer.round_trip(event, FEEDBACK_KIND)
    cancel = requests.cancel(event, body)
    await trainer.round_trip(cancel, RESULT_KIND)  # the cancel's own answer
    deadline = time.perf_counter() + BOUND
    while (RESULT_KIND, event.id) not in trainer.arrived:  # the run's cancelled result
        if time.perf_counter() > deadline:
            raise TimeoutError("the cancelled run never answered")
        await asyncio.sleep(0.001)
    return took


async def publish_once(trainer: Trainer, requests: Requests) -> float:
    """A finished run (not timed), then its publish, timed until the result with both pointers."""
    run = requests.finishing()
    await trainer.round_trip(run, RESULT_KIND)
    ran = trainer.open(RESULT_KIND, run.id)
    if not isinstance(ran, ResultBody) or not isinstance(ran.output, RunOutput):
        raise AssertionError(f"the run to publish did not finish: {ran}")
    publish = requests.execute(PublishInput(ran.output.report))[0]
    took = await trainer.round_trip(publish, RESULT_KIND)
    done = trainer.open(RESULT_KIND, publish.id)
    if not isinstance(done, ResultBody) or not isinstance(done.output, PublishOutput):
        raise AssertionError(f"the publish did not complete: {done}")
    return took


async def flood(trainer: Trainer, requests: Requests, service_pid: int, found: Flood) -> None:
    """Send FLOOD refusable requests as fast as the socket takes them (with `found.window`: as fast as no more
    than that many are unanswered), and count the answers."""
    events = [requests.too_large() for _ in range(FLOOD)]
    texts = [encode(ClientEvent(event)) for event in events]
    found.ids = {event.id for event in events}
    done, room = asyncio.Event(), asyncio.Event()
    last = [0.0]
    answers = [0]

    def counted() -> None:
        answers[0] += 1
        last[0] = time.perf_counter()
        room.set()
        if answers[0] >= FLOOD:
            done.set()

    trainer.counting = counted
    cpu_before = cpu_seconds(service_pid)
    started = time.perf_counter()
    try:
        for index, text in enumerate(texts):
            while found.window is not None and index - answers[0] >= found.window:
                room.clear()
                await asyncio.wait_for(room.wait(), BOUND)  # a request the relay lost never frees its place
            await trainer.out.send(text)
            await asyncio.sleep(0)  # let the readers drain as they go
        found.sent_s = time.perf_counter() - started
        await asyncio.wait_for(done.wait(), BOUND)
    except TimeoutError:
        pass
    trainer.counting = None
    found.cpu_s = cpu_seconds(service_pid) - cpu_before
    found.wall_s = (last[0] or time.perf_counter()) - started
    answered = sum(1 for event_id in found.ids if (RESULT_KIND, event_id) in trainer.arrived)
    found.unanswered = FLOOD - answered
    found.rate = answered / (last[0] - started) if answered else 0.0


async def measure(url: str, runner: str, service_pid: int) -> Figures:
    figures = Figures(service_pid=service_pid)
    options: dict[str, Any] = {"compression": None, "max_size": None, "max_queue": None, "ping_interval": None}
    async with connect(url, **options) as out, connect(url, **options) as into:
        trainer = Trainer(out, into, runner)
        readers = [asyncio.create_task(trainer.read(ws)) for ws in (out, into)]
        await trainer.subscribe()
        requests = Requests(trainer)
        for index in range(WARM_ECHOES):
            await trainer.round_trip(requests.echo(index), ECHO_KIND)
        for _ in range(WARM_REFUSALS):
            await trainer.round_trip(requests.too_large(), RESULT_KIND)
        for _ in range(WARM_ACCEPTS):
            await accept_once(trainer, requests)
        for _ in range(WARM_PUBLISHES):
            await publish_once(trainer, requests)

        echoes = [requests.echo(WARM_ECHOES + index) for index in range(ECHOES)]
        refusals = [requests.too_large() for _ in range(REFUSALS)]
        planned = [requests.asks_exec() for _ in range(PLANNED_REFUSALS)]
        # interleaved, so a drift in the machine's load hits every figure alike
        for index in range(max(ECHOES, REFUSALS)):
            if index < ECHOES:
                figures.echo.append(await trainer.round_trip(echoes[index], ECHO_KIND))
            if index < REFUSALS:
                figures.refusal.append(await trainer.round_trip(refusals[index], RESULT_KIND))
            if index < PLANNED_REFUSALS:
                figures.planned.append(await trainer.round_trip(planned[index], RESULT_KIND))
            if index < ACCEPTS:
                figures.accepted.append(await accept_once(trainer, requests))
            if index < PUBLISHES:
                figures.published.append(await publish_once(trainer, requests))
        figures.idle_rss_kib = rss_kib(service_pid)

        for found in (Flood("flood, back to back", None), Flood(f"flood, ≤ {WINDOW} unanswered", WINDOW)):
            await flood(trainer, requests, service_pid, found)
            figures.floods.append(found)
        figures.peak_rss_kib = rss_kib(service_pid, "VmHWM")

        refused = trainer.open(RESULT_KIND, refusals[-1].id)
        assert isinstance(refused, ResultBody)
        figures.checks.append(f"refusal: {refused.outcome} {refused.code}: {refused.message}")
        refused = trainer.open(RESULT_KIND, planned[-1].id)
        assert isinstance(refused, ResultBody)
        figures.checks.append(f"planned refusal: {refused.outcome} {refused.code}: {refused.message}")
        if refused.code != Code.NOT_ADMITTED:
            raise AssertionError("the planned refusal was not the one meant")
        if trainer.refused_oks:
            figures.checks.append(f"the relay refused {len(trainer.refused_oks)}: {trainer.refused_oks[0]}")
        for reader in readers:
            reader.cancel()
    return figures


def service_log_summary(lines: list[str], found: Flood) -> str:
    """What the service's log says of a flood: requests it refused, answers it failed to publish, drops."""
    prefixes = {event_id[:12] for event_id in found.ids}
    refused = sum(1 for line in lines if line.startswith("refused ") and line.split()[1] in prefixes)
    failed = [line for line in lines if line.startswith("answer to ")]
    dropped = [line for line in lines if line.startswith("dropped ")]
    return (
        f"service log, {found.name}: refused {refused:,} of {len(found.ids):,}; "
        f"{len(failed)} answers failed to publish"
        + (f" (first: {failed[0]})" if failed else "")
        + f"; {len(dropped)} dropped"
    )


def service_side(usage: Path, found: Flood) -> None:
    """A flood as the service saw it, from its usage records: how many it answered, from the first arrival
    to the last answer (each record holds its arrival time and how long the answer took)."""
    spans = []
    for record in read_usage(usage).records:
        if record.request in found.ids:
            moment = datetime.strptime(record.time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            arrived = moment.timestamp() * 1000
            spans.append((arrived, arrived + record.total_ms))
    found.service_answered = len(spans)
    if len(spans) > 1:
        window_ms = max(end for _, end in spans) - min(start for start, _ in spans)
        found.service_rate = len(spans) / (window_ms / 1000) if window_ms > 0 else 0.0


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def flood_rows(found: Flood) -> list[tuple[str, str, str]]:
    met = found.rate >= FLOOD_RATE and found.unanswered == 0
    share = found.cpu_s / found.wall_s if found.wall_s else 0.0
    return [
        (
            f"{found.name} ({FLOOD:,} refusable)",
            f"{found.rate:,.0f} answered/s, {found.unanswered} unanswered (sent in {found.sent_s * 1000:.0f} ms)",
            f"≥ {FLOOD_RATE:,.0f}/s, 0 unanswered: {verdict(met)}",
        ),
        (
            "  as the service saw it",
            f"{found.service_rate:,.0f} answered/s, {found.service_answered:,} reached it; "
            f"{found.cpu_s / FLOOD * 1000:.2f} ms CPU per request, {share:.0%} of a core",
            "(usage records, /proc)",
        ),
    ]


def report(figures: Figures) -> None:
    echo50 = ms(figures.echo, 0.5)
    refusal50, refusal95 = ms(figures.refusal, 0.5), ms(figures.refusal, 0.95)
    planned50, planned95 = ms(figures.planned, 0.5), ms(figures.planned, 0.95)
    accepted50, accepted95 = ms(figures.accepted, 0.5), ms(figures.accepted, 0.95)
    published50, published95 = ms(figures.published, 0.5), ms(figures.published, 0.95)
    factor = refusal50 / echo50
    rows = [
        (f"relay bare echo ({ECHOES})", f"p50 {echo50:.2f} ms  p95 {ms(figures.echo, 0.95):.2f} ms", "(the floor)"),
        (
            f"refusal round trip, too_large ({REFUSALS})",
            f"p50 {refusal50:.2f} ms  p95 {refusal95:.2f} ms  = {factor:.1f}× echo",
            f"p50 ≤ {REFUSAL_P50_MS:g} ms and ≤ {ECHO_FACTOR:g}× echo: "
            + verdict(refusal50 <= REFUSAL_P50_MS and factor <= ECHO_FACTOR),
        ),
        (
            f"refusal after planning, not_admitted ({PLANNED_REFUSALS})",
            f"p50 {planned50:.2f} ms  p95 {planned95:.2f} ms",
            "(no target; for comparison)",
        ),
        (
            f"accepted latency ({ACCEPTS})",
            f"p50 {accepted50:.2f} ms  p95 {accepted95:.2f} ms",
            f"p50 ≤ {ACCEPTED_P50_MS:g} ms: {verdict(accepted50 <= ACCEPTED_P50_MS)}",
        ),
        (
            f"publish round trip, a fresh run ({PUBLISHES})",
            f"p50 {published50:.2f} ms  p95 {published95:.2f} ms",
            "(request → both pointers; no target)",
        ),
        *(row for found in figures.floods for row in flood_rows(found)),
        (
            "idle RSS, service subprocess",
            f"{figures.idle_rss_kib / 1024:.1f} MiB (peak {figures.peak_rss_kib / 1024:.1f} MiB after the flood)",
            "(no target)",
        ),
    ]
    width = max(len(name) for name, _, _ in rows)
    value_width = max(len(value) for _, value, _ in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<{value_width}}  {target}")
    for line in figures.checks:
        print(f"  checked: {line}")


async def bench() -> Figures:
    relay = (
        sdk.LocalRelayBuilder()
        .addr("127.0.0.1")
        .rate_limit(sdk.RateLimit(max_reqs=1_000, notes_per_minute=1_000_000))
        .build()
    )
    await relay.run()
    url = str(await relay.url())
    secret = SecretKey.generate()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-service-") as root,
            open(Path(root) / "service.log", "w") as logs,
        ):
            profile = os.environ.get("BENCH_PROFILE")  # a path: the service runs under cProfile, its stats kept there
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *(["-m", "cProfile", "-o", profile] if profile else []),
                __file__,
                "--serve",
                url,
                root,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=logs,
            )
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(secret.to_hex().encode() + b"\n")  # the key never goes on a command line
            await process.stdin.drain()
            try:
                ready = await asyncio.wait_for(process.stdout.readline(), BOUND)
                if ready.strip() != b"ready":
                    raise RuntimeError(f"the service did not start; see its log: {ready!r}")
                figures = await measure(url, secret.public_key().to_hex(), process.pid)
            finally:
                process.stdin.close()
                await asyncio.wait_for(process.wait(), BOUND)
            logged = (Path(root) / "service.log").read_text().splitlines()
            for found in figures.floods:
                figures.checks.append(service_log_summary(logged, found))
                service_side(Path(root) / "state" / "usage", found)
            return figures
    finally:
        relay.shutdown()


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        url, root = sys.argv[2], Path(sys.argv[3])
        asyncio.run(serve(url, root, SecretKey.parse(sys.stdin.readline().strip())))
        return
    print(f"service on loopback ({os.cpu_count()} cores, Python {sys.version.split()[0]})")
    report(asyncio.run(bench()))


if __name__ == "__main__":
    main()
