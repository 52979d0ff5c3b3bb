"""The embedded Blossom server beside a plain aiohttp file server, in one run: `uv run python bench/blobs.py`.

Figures: upload and fetch of 1,000 × 4 KiB and 20 × 4 MiB blobs, one request at a time over loopback, as
MiB/s (bytes over the wall time of the whole batch) and p50 per request, through

* ours: the embedded server (`BlobServer`): `PUT /upload` with a NIP-98 authorization (signed before the clock
  starts), checked, hashed and kept atomically (temp file, fsync, link, plus the `.type` sidecar);
  `GET /<sha256>` (a `FileResponse` with the stored type);
* plain: a bare aiohttp app on the same loop: `PUT /<name>` reads the body and keeps it the same durable way
  (temp file, fsync, rename) with no authorization, hash or sidecar; `GET` is `web.static` serving the very
  directory the embedded server wrote;

and the ratio ours / plain per request (target: within 2×). Beside them, the runner's own client
(`BlobStore`): `upload` (HEAD, sign, PUT, descriptor check) and `fetch` (GET, bounded read, digest check)
against the embedded server. The client is aiohttp in the same process, so every figure includes its cost.

Last, the example extension's test set released into the embedded server (as `eval-runner release` does) and
materialized as admission does for a run of it: from cold (no cache: the `3184` checked, the manifest and every
file fetched and checked, the case files written) and from the cache (every byte hashed again), p50 of each.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import load_suite
from eval_runner.nostr import Event, Filter, SecretKey, authorization_event
from eval_runner.nostr.nip98 import header_value
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.releases import release_suite, suite_release
from eval_runner.service.releases.materialize import SuiteCache, materialize

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "codebase-brief"
MATERIALIZE_ROUNDS = 30

KIB, MIB = 1024, 1024 * 1024
BATCHES = ((1_000, 4 * KIB), (20, 4 * MIB))
WARM = 20
TARGET_RATIO = 2.0
#: Not the default type, so every upload also keeps its `.type` sidecar.
MEDIA_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class Figure:
    seconds: list[float]
    total: int

    @property
    def rate(self) -> float:
        return self.total / MIB / sum(self.seconds)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.seconds) * 1000


async def timed(calls: list[Callable[[], Awaitable[None]]], size: int) -> Figure:
    seconds = []
    for call in calls:
        started = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - started)
    return Figure(seconds, size * len(calls))


async def side_by_side(
    ours: list[Callable[[], Awaitable[None]]], plain: list[Callable[[], Awaitable[None]]], size: int
) -> tuple[Figure, Figure]:
    """Request by request, alternating, so the disk's moods (fsync times vary 3x here) fall on both alike."""
    mine: list[float] = []
    theirs: list[float] = []
    for one, other in zip(ours, plain, strict=True):
        for call, seconds in ((one, mine), (other, theirs)):
            started = time.perf_counter()
            await call()
            seconds.append(time.perf_counter() - started)
    return Figure(mine, size * len(mine)), Figure(theirs, size * len(theirs))


def plain_app(upload_root: Path, serve_root: Path) -> web.Application:
    async def put(request: web.Request) -> web.Response:
        body = await request.read()
        name = request.match_info["name"]

        def keep() -> None:
            temp = upload_root / f".{name}.tmp"
            with temp.open("wb") as file:
                file.write(body)
                file.flush()
                os.fsync(file.fileno())
            temp.rename(upload_root / name)

        await asyncio.to_thread(keep)
        return web.Response(status=201)

    app = web.Application(client_max_size=64 * MIB)
    app.router.add_put("/{name}", put)
    app.router.add_static("/files", serve_root)
    return app


async def main() -> None:
    key = SecretKey.generate()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp) / "blobs"
        (Path(temp) / "plain").mkdir()
        root.mkdir()
        async with BlobServer(root, [key.public_key().to_hex()], max_bytes=16 * MIB) as server:
            runner = web.AppRunner(plain_app(Path(temp) / "plain", root), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            plain = f"http://127.0.0.1:{runner.addresses[0][1]}"
            try:
                await run(server, plain, key)
                await materializing(server, key, Path(temp) / "runs")
            finally:
                await runner.cleanup()


async def run(server: BlobServer, plain: str, key: SecretKey) -> None:
    print(f"{'batch':<16}{'path':<8}{'upload MiB/s':>14}{'p50 ms':>9}{'fetch MiB/s':>14}{'p50 ms':>9}")
    ratios: list[tuple[str, float, float]] = []
    async with aiohttp.ClientSession() as http, BlobStore([server.url], server.url, key) as store:
        for count, size in BATCHES:
            label = f"{count} x {size // KIB} KiB" if size < MIB else f"{count} x {size // MIB} MiB"
            for phase in ("warm", "measured"):
                blobs = [os.urandom(size) for _ in range(WARM if phase == "warm" else count)]
                digests = [hashlib.sha256(blob).hexdigest() for blob in blobs]
                figures = await measure(server, plain, key, http, store, blobs, digests, size)
            ours_up, ours_get, plain_up, plain_get, client_up, client_get = figures
            for path, up, get in (("ours", ours_up, ours_get), ("plain", plain_up, plain_get)):
                print(f"{label:<16}{path:<8}{up.rate:>14.1f}{up.p50_ms:>9.2f}{get.rate:>14.1f}{get.p50_ms:>9.2f}")
            print(
                f"{label:<16}{'client':<8}{client_up.rate:>14.1f}{client_up.p50_ms:>9.2f}"
                f"{client_get.rate:>14.1f}{client_get.p50_ms:>9.2f}"
            )
            ratios.append((label, ours_up.p50_ms / plain_up.p50_ms, ours_get.p50_ms / plain_get.p50_ms))
    print()
    for label, upload, fetch in ratios:
        verdict = "ok" if max(upload, fetch) <= TARGET_RATIO else f"over {TARGET_RATIO}x"
        print(f"ours / plain p50, {label}: upload {upload:.2f}x, fetch {fetch:.2f}x ({verdict})")


class HeldReleases:
    """The relay side of a release for the benchmark: it keeps what is published (no relay is measured here)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)

    async def query(self, filter_: Filter) -> list[Event]:
        return list(self.events)


async def materializing(server: BlobServer, key: SecretKey, runs: Path) -> None:
    """The example's test set released into `server`, then materialized cold and from the cache."""
    author = key.public_key().to_hex()
    prepared = suite_release(
        load_suite(EXAMPLE / "evals"), author=author, package="codebase-brief-tests", gate_file=gate_file()
    )
    async with BlobStore([server.url], server.url, key) as store:
        relay = HeldReleases()
        await release_suite(prepared, secret=key, blobs=store, relay=relay)
        (event,) = relay.events
        staging = [
            runs / name
            for name in ("fill", *(f"{kind}-{i}" for kind in ("cold", "cached") for i in range(MATERIALIZE_ROUNDS)))
        ]
        for directory in staging:
            directory.mkdir(parents=True)
        cold, cached = [], []
        for round_ in range(MATERIALIZE_ROUNDS):
            started = time.perf_counter()
            await materialize(event, store, runs / f"cold-{round_}")
            cold.append(time.perf_counter() - started)
        cache = SuiteCache(runs / "cache")
        await materialize(event, store, runs / "fill", cache=cache)
        for round_ in range(MATERIALIZE_ROUNDS):
            started = time.perf_counter()
            await materialize(event, store, runs / f"cached-{round_}", cache=cache)
            cached.append(time.perf_counter() - started)
    uploads = prepared.uploads()
    cold_ms, cached_ms = statistics.median(cold) * 1000, statistics.median(cached) * 1000
    print()
    print(
        f"materializing the example suite ({len(uploads)} blobs, {sum(len(f.data) for f in uploads)} bytes, "
        f"{MATERIALIZE_ROUNDS} rounds each): cold p50 {cold_ms:.2f} ms, from the cache p50 {cached_ms:.2f} ms"
    )


async def measure(
    server: BlobServer,
    plain: str,
    key: SecretKey,
    http: aiohttp.ClientSession,
    store: BlobStore,
    blobs: list[bytes],
    digests: list[str],
    size: int,
) -> tuple[Figure, ...]:
    def ours_put(blob: bytes, digest: str, authorization: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            headers = {"Authorization": authorization, "Content-Type": MEDIA_TYPE}
            async with http.put(server.upload_url, data=blob, headers=headers) as response:
                assert response.status == 201, response.status
                await response.read()

        return call

    def plain_put(blob: bytes, digest: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            async with http.put(f"{plain}/{digest}", data=blob) as response:
                assert response.status == 201, response.status

        return call

    def get(url: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            async with http.get(url) as response:
                assert response.status == 200, response.status
                assert len(await response.read()) == size

        return call

    now = int(time.time())
    signed = [header_value(authorization_event(key, server.upload_url, "PUT", digest, now)) for digest in digests]
    ours_up, plain_up = await side_by_side(
        [ours_put(b, d, a) for b, d, a in zip(blobs, digests, signed, strict=True)],
        [plain_put(b, d) for b, d in zip(blobs, digests, strict=True)],
        size,
    )
    ours_get, plain_get = await side_by_side(
        [get(f"{server.url}/{d}") for d in digests], [get(f"{plain}/files/{d[:2]}/{d}") for d in digests], size
    )

    fresh = [os.urandom(size) for _ in blobs]

    def client_upload(blob: bytes) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            assert (await store.upload(blob, MEDIA_TYPE)).outcome == "created"

        return call

    def client_fetch(digest: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            assert len(await store.fetch(digest)) == size

        return call

    client_up = await timed([client_upload(blob) for blob in fresh], size)
    client_get = await timed([client_fetch(hashlib.sha256(blob).hexdigest()) for blob in fresh], size)
    return ours_up, ours_get, plain_up, plain_get, client_up, client_get


if __name__ == "__main__":
    asyncio.run(main())
