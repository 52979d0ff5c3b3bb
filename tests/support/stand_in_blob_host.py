"""A stand-in for a hostile blob host (someone else's Blossom server, outside our control): it serves the blobs
it was given by their sha256 like any Blossom server, except one, which it serves badly in the way it was told:
a slow drip, a body far past the bound, other bytes, a 5xx, or a redirect to another host. The other host (on
127.0.0.2) counts what reaches it, so a test can see a redirect away was never followed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

Misbehaviour = Literal["drip", "huge", "wrong", "error", "away"]
MIB = 1024 * 1024


@dataclass
class BlobHost:
    """What the host serves (`blobs` by hex), which blob it spoils (`target`) and how, and what it saw."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    target: str = ""
    misbehaviour: Misbehaviour = "wrong"
    url: str = ""
    far_url: str = ""
    far_hits: int = 0

    def put(self, data: bytes) -> str:
        name = hashlib.sha256(data).hexdigest()
        self.blobs[name] = data
        return name

    def spoil(self, data: bytes, misbehaviour: Misbehaviour) -> None:
        self.target = hashlib.sha256(data).hexdigest()
        self.misbehaviour = misbehaviour


async def _drip(request: web.Request, declared: int) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Length": str(declared)})
    await response.prepare(request)
    try:
        for _ in range(2_000):  # bounded: the client leaves long before
            await response.write(b"x")
            await asyncio.sleep(0.05)
    except (ConnectionError, RuntimeError):
        pass
    return response


async def _flood(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    try:
        for _ in range(40):
            await response.write(b"f" * MIB)
    except (ConnectionError, RuntimeError):
        pass
    return response


def _application(host: BlobHost) -> web.Application:
    async def get(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        data = host.blobs.get(name)
        if data is None:
            return web.Response(status=404)
        if name != host.target:
            return web.Response(body=data)
        if host.misbehaviour == "drip":
            return await _drip(request, len(data))
        if host.misbehaviour == "huge":
            return await _flood(request)
        if host.misbehaviour == "wrong":
            return web.Response(body=data + b"\nand something else")
        if host.misbehaviour == "error":
            return web.Response(status=503, text="busy")
        raise web.HTTPFound(f"{host.far_url}/{name}")

    app = web.Application()
    app.router.add_get("/{name}", get)
    return app


@asynccontextmanager
async def blob_host() -> AsyncIterator[BlobHost]:
    """The hostile host on 127.0.0.1 and "another host" on 127.0.0.2 that serves every blob it is asked for."""
    host = BlobHost()

    async def far(request: web.Request) -> web.Response:
        host.far_hits += 1
        return web.Response(body=host.blobs.get(request.match_info["name"], b""))

    far_app = web.Application()
    far_app.router.add_get("/{name}", far)
    runners = []
    try:
        for app, address in ((_application(host), "127.0.0.1"), (far_app, "127.0.0.2")):
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, address, 0).start()
            runners.append(runner)
            url = f"http://{address}:{runner.addresses[0][1]}"
            if address == "127.0.0.1":
                host.url = url
            else:
                host.far_url = url
        yield host
    finally:
        for runner in runners:
            await runner.cleanup()
