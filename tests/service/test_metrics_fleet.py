"""`queued_runs` in a fleet: the depth of the database's queue (every runner's runs waiting there), read in a
thread at each scrape, with a real PostgreSQL ledger and the endpoint fetched over HTTP as a scraper does.

A lone runner's gauge counts the runs waiting on its own slot semaphore; in a fleet nothing waits there
(its taker holds a slot only while it looks), so the figure must come from the database.
"""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from eval_runner.service.ledger.claims import Job
from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.ledger.queued import Queued
from eval_runner.service.metrics import RunnerMetrics, serving
from eval_runner.service.settings import Limits, MetricsListen
from tests.support.ledger_requests import NOW, TRAINER, WORKER, dispatch, execute
from tests.support.postgres_server import PostgresServer
from tests.support.stand_in_relay import BOUND


def enqueue(ledger: PostgresLedger, request: str) -> None:
    claim = dispatch(ledger, execute(request))
    job = Job(key=claim.key, action="run", principal=TRAINER, request="{}", status="running")
    ledger.enqueue(job, Queued(claim.key, "{}", 1_000, 42, "{}"))


async def scraped(http: aiohttp.ClientSession, base: str) -> float:
    async with http.get(f"{base}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    [depth] = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "eval_runner_queued_runs"
    ]
    return depth


async def test_queued_runs_is_the_database_queues_depth_read_off_the_event_loop(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    admitter = PostgresLedger.connect(url, tmp_path / "admitter", WORKER, NOW, lease_ms=30_000)
    scraped_runner = PostgresLedger.connect(url, tmp_path / "scraped", WORKER, NOW, lease_ms=30_000)
    readers: list[threading.Thread] = []

    def depth() -> int:
        readers.append(threading.current_thread())
        return scraped_runner.queue_depth()

    metrics = RunnerMetrics(Limits(jobs=1), probe=30, queue_depth=depth)
    try:
        for n in range(3):  # queued by another runner of the fleet
            enqueue(admitter, f"queued-{n}")
        slots = metrics.suite_slots(1)
        await slots.acquire()
        waiting = asyncio.ensure_future(slots.acquire())  # a wait on this runner's own slot is not the queue
        async with serving(metrics, MetricsListen("127.0.0.1", 0)) as base, aiohttp.ClientSession() as http:
            assert await scraped(http, base) == 3
            assert scraped_runner.take() is not None
            assert await scraped(http, base) == 2, "read again at each scrape"
            assert readers, "the depth was read"
            assert threading.main_thread() not in readers, "never on the event loop's thread"
            slots.release()
            await asyncio.wait_for(waiting, BOUND)
            slots.release()
            scraped_runner.close()  # the database gone for this runner: the figure is unknown, not stale
            assert math.isnan(await scraped(http, base))
    finally:
        admitter.close()
        scraped_runner.close()
