"""What the runner counts (service/metrics.py): each fact from the record that defines it, in a registry of
the runner's own, with labels only from fixed vocabularies, and `/healthz` by the watchdog's rule.

The registry is read back through prometheus-client's own text parser, as a scraper reads it.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eval_runner.contracts.errors import Code
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobCode, BlobError, Upload
from eval_runner.service.config import Config, ConfigError
from eval_runner.service.metrics import (
    HEALTHY,
    NO_METRICS,
    UNHEALTHY,
    Health,
    MetricsError,
    RunnerMetrics,
    drop_reason,
    label,
    serving,
)
from eval_runner.service.relay.liveness import Ended
from eval_runner.service.requests.opening import DropError, open_request
from eval_runner.service.settings import Limits, MetricsListen
from eval_runner.service.usage import Record
from tests.support.stand_in_relay import BOUND, request

LABEL_NAMES = {"outcome", "code", "reason", "operation", "eval_runner_relay_state", "le"}
WORD = re.compile(r"[a-z][a-z_]{0,39}")


def samples(metrics: RunnerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, by name and sorted labels."""
    text = metrics.exposition().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(metrics: RunnerMetrics, name: str, **labels: str) -> float:
    return samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


def record(action: str, outcome: str, code: str | None = None, turns: int | None = None, total_ms: int = 40) -> Record:
    trainer = SecretKey.generate().public_key().to_hex()
    return Record(
        time="2026-12-02T00:00:00Z",
        key=trainer,
        request="ab" * 32,
        action=action,
        subject="00" * 32 + ":codebase-brief/codebase-brief",
        turns=turns,
        outcome=outcome,
        code=code,
        total_ms=total_ms,
        bytes_in=100,
    )


def test_requests_refusals_runs_and_turns_come_from_the_usage_records() -> None:
    metrics = RunnerMetrics(Limits(), probe=30)
    metrics.answered(record("run", "refused", Code.NOT_ADMITTED.value))
    metrics.answered(record("run", "refused", Code.NOT_ADMITTED.value))
    metrics.answered(record("check", "completed", turns=12, total_ms=90_000))
    metrics.answered(record("validation", "failed", "failed", turns=4))
    metrics.answered(record("publish", "completed"))
    assert value(metrics, "eval_runner_requests_total", outcome="refused", code="not_admitted") == 2
    assert value(metrics, "eval_runner_requests_total", outcome="completed", code="none") == 2
    assert value(metrics, "eval_runner_refusals_total", code="not_admitted") == 2
    # A publish is a request answered, not a run.
    assert value(metrics, "eval_runner_runs_total", outcome="completed") == 1
    assert value(metrics, "eval_runner_runs_total", outcome="failed") == 1
    assert value(metrics, "eval_runner_turns_total", outcome="completed") == 12
    assert value(metrics, "eval_runner_turns_total", outcome="failed") == 4
    assert value(metrics, "eval_runner_time_to_result_seconds_count", outcome="refused") == 2
    assert value(metrics, "eval_runner_time_to_result_seconds_bucket", outcome="completed", le="60.0") == 1
    assert value(metrics, "eval_runner_time_to_result_seconds_bucket", outcome="completed", le="120.0") == 2


def test_capacity_is_the_configured_slots() -> None:
    metrics = RunnerMetrics(Limits(jobs=3, concurrency=5), probe=30)
    assert value(metrics, "eval_runner_suite_slots") == 3
    assert value(metrics, "eval_runner_run_slots") == 15
    assert value(metrics, "eval_runner_relay_state", eval_runner_relay_state="connecting") == 1


async def test_suite_slots_count_the_runs_in_them_and_the_runs_waiting() -> None:
    metrics = RunnerMetrics(Limits(jobs=1), probe=30)
    slots = metrics.suite_slots(1)
    await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)  # let it start waiting: there is no event for "is waiting on a semaphore"
    assert value(metrics, "eval_runner_suite_slots_in_use") == 1
    assert value(metrics, "eval_runner_queued_runs") == 1
    slots.release()
    await asyncio.wait_for(waiting, BOUND)
    assert value(metrics, "eval_runner_queued_runs") == 0
    assert value(metrics, "eval_runner_suite_slots_in_use") == 1
    # A run cancelled while it waits leaves the queue, and never held a slot.
    cancelled = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    assert value(metrics, "eval_runner_queued_runs") == 1
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert value(metrics, "eval_runner_queued_runs") == 0
    slots.release()
    assert value(metrics, "eval_runner_suite_slots_in_use") == 0


async def test_without_metrics_the_pipeline_gets_a_plain_semaphore() -> None:
    slots = NO_METRICS.suite_slots(2)
    assert type(slots) is asyncio.Semaphore
    NO_METRICS.dropped("anything", verified=False)
    NO_METRICS.answered(record("run", "refused", "not_admitted"))
    NO_METRICS.accepted(0.1)
    NO_METRICS.turns_running(1)


def test_every_way_an_event_is_dropped_has_a_reason_word() -> None:
    runner = SecretKey.generate()
    pubkey = runner.public_key().to_hex()
    now = 1_700_000_000
    cases = {
        "not_addressed": request(SecretKey.generate().public_key().to_hex(), "x", now),
        "stale": request(pubkey, "x", now - 100_000),
        "unreadable": request(pubkey, "not a NIP-44 payload", now),
    }
    for expected, event in cases.items():
        with pytest.raises(DropError) as dropped:
            open_request(event, runner, now)
        assert drop_reason(dropped.value.reason, verified=dropped.value.verified) == expected
    assert drop_reason("kind 1 is not an execution request (25920)", verified=False) == "kind"
    assert drop_reason("the event id does not match", verified=False) == "unverified"
    assert drop_reason("a control names exactly one execute event in an e tag; this one has []", verified=True) == (
        "control_target"
    )


def test_labels_are_words_and_nothing_else() -> None:
    key = SecretKey.generate()
    for text in (key.to_hex(), key.public_key().to_hex(), "ab" * 32, "Not_Admitted", "x" * 41, "a b", "é"):
        assert label(text) == "other"
    assert label(None) == label("") == "none"
    assert label("idempotency_conflict") == "idempotency_conflict"


def test_no_key_id_or_token_reaches_a_label() -> None:
    """Everything the pipeline hands over, with keys and ids in every free-text field, and the exposition
    holds none of them: every label is one of ours, every value a word."""
    metrics = RunnerMetrics(Limits(), probe=30)
    secret = SecretKey.generate()
    trainer = SecretKey.generate().public_key().to_hex()
    hostile = [secret.to_hex(), trainer, "sk-door-" + "9" * 40, "deadbeef" * 8]
    for text in hostile:
        metrics.answered(record("run", text, code=text))
        metrics.answered(record(text, "refused", code=text))
        metrics.dropped(f"the p tags name [{text[:12]}], not exactly this runner", verified=True)
        metrics.dropped(text, verified=False)
    metrics.relay_ended(Ended(False, f"the relay closed the subscription: {trainer}"))
    exposition = metrics.exposition().decode()
    for text in hostile:
        assert text not in exposition
        assert text[:12] not in exposition
    for name, labels in samples(metrics):
        for label_name, label_value in labels:
            assert label_name in LABEL_NAMES, name
            assert label_name == "le" or WORD.fullmatch(label_value), (name, label_name, label_value)


class StandInStore:
    """A blob store that fails every call with a given code (the store is outside the runner's control)."""

    def __init__(self, code: BlobCode) -> None:
        self.code: BlobCode = code

    async def fetch(self, digest: str) -> bytes:
        raise BlobError(self.code, f"sha256:{digest} could not be fetched (http://store: answered HTTP 503)")

    async def has(self, digest: str) -> bool:
        return False

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload:
        raise BlobError(self.code, "http://store could not take it: refused")


async def test_blob_store_errors_are_counted_and_passed_on() -> None:
    metrics = RunnerMetrics(Limits(), probe=30)
    store = metrics.blobs(StandInStore("unavailable"))
    with pytest.raises(BlobError):
        await store.fetch("00" * 32)
    with pytest.raises(BlobError):
        await store.fetch("00" * 32)
    with pytest.raises(BlobError):
        await store.upload(b"x")
    assert await store.has("00" * 32) is False
    assert value(metrics, "eval_runner_blob_errors_total", operation="fetch", code="unavailable") == 2
    assert value(metrics, "eval_runner_blob_errors_total", operation="upload", code="unavailable") == 1


def test_health_is_a_proof_not_older_than_its_window_on_a_connection_still_open() -> None:
    now = [100.0]
    health = Health(60.0, clock=lambda: now[0])
    assert not health.healthy()  # never proven
    health.proven()
    assert health.healthy()
    now[0] += 60.0
    assert health.healthy()
    now[0] += 0.5  # a listener stuck somewhere: no proof for longer than the window
    assert not health.healthy()
    health.proven()
    assert health.healthy()
    health.ended()  # the connection ended: unhealthy at once, whatever the clock says
    assert not health.healthy()


def test_each_proof_also_reaches_systemd(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        receiver.settimeout(BOUND)
        metrics = RunnerMetrics(Limits(), probe=30)
        notifier = metrics.notifier(str(path))
        assert not metrics.health.healthy()
        notifier.watchdog()
        assert receiver.recv(64) == b"WATCHDOG=1"
        assert metrics.health.healthy()
        assert value(metrics, "eval_runner_relay_state", eval_runner_relay_state="subscribed") == 1
        notifier.close()


async def test_the_endpoint_serves_metrics_and_health_and_refuses_a_taken_port() -> None:
    metrics = RunnerMetrics(Limits(), probe=30)
    async with serving(metrics, MetricsListen("127.0.0.1", 0)) as base, aiohttp.ClientSession() as http:
        async with http.get(f"{base}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "eval_runner_suite_slots 2.0" in await response.text()
        async with http.get(f"{base}/healthz") as response:
            assert (response.status, await response.text()) == (503, UNHEALTHY)
        metrics.notifier(None).watchdog()
        async with http.get(f"{base}/healthz") as response:
            assert (response.status, await response.text()) == (200, HEALTHY)
        port = int(base.rsplit(":", 1)[1])
        with pytest.raises(MetricsError, match=f"the metrics endpoint can't listen on http://127.0.0.1:{port}: "):
            async with serving(RunnerMetrics(Limits(), probe=30), MetricsListen("127.0.0.1", port)):
                pass


def test_two_runners_in_one_process_keep_their_own_counts() -> None:
    first, second = RunnerMetrics(Limits(), probe=30), RunnerMetrics(Limits(), probe=30)
    first.answered(record("run", "refused", "not_admitted"))
    assert value(first, "eval_runner_refusals_total", code="not_admitted") == 1
    assert value(second, "eval_runner_refusals_total", code="not_admitted") == 0


def test_the_endpoint_is_off_unless_a_host_and_port_are_given() -> None:
    base = {"EVAL_RUNNER_CATALOG": "/srv/tool", "EVAL_RUNNER_CODER": "/srv/agent", "CODER_DOOR_KEY": "k"}
    assert Config.from_env(base).metrics_listen is None
    assert Config.from_env({**base, "EVAL_RUNNER_METRICS_LISTEN": " 127.0.0.1:9464 "}).metrics_listen == (
        MetricsListen("127.0.0.1", 9464)
    )
    assert Config.from_env({**base, "EVAL_RUNNER_METRICS_LISTEN": "[::1]:0"}).metrics_listen == MetricsListen("::1", 0)
    for wrong in ("9464", "localhost", "0.0.0.0:99999", "a b:1"):
        with pytest.raises(ConfigError) as refused:
            Config.from_env({**base, "EVAL_RUNNER_METRICS_LISTEN": wrong})
        assert refused.value.problems == (f"EVAL_RUNNER_METRICS_LISTEN must be HOST:PORT, not {wrong!r}",)
