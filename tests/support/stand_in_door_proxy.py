"""A stand-in for the per-run door proxy (`engine/run/door_proxy.py`), for the sandbox and run tests.

It listens on the Unix socket path the run gives it, as the real proxy does, answers every request
itself (no upstream), records what arrived, and can play a door that refuses the key (`auth_failed`).
A request to `/ready` sets `ready`: the stand-in agent's way of saying it has reached a given point,
so tests await an event instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web


@dataclass(slots=True)
class Arrived:
    method: str
    path_qs: str
    authorised: bool


class StandInDoorProxy:
    def __init__(
        self, socket_path: Path, *, name: str = "coder", refuse: bool = False, ready: asyncio.Event | None = None
    ) -> None:
        self.socket_path = socket_path
        self.name = name
        self.refuse = refuse
        self._token = secrets.token_hex(32)
        self._auth_failed = False
        self.arrived: list[Arrived] = []
        self.ready = ready or asyncio.Event()
        self.closed = False
        self._runner: web.AppRunner | None = None

    @property
    def token(self) -> str:
        return self._token

    @property
    def auth_failed(self) -> bool:
        return self._auth_failed

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket_path)).start()
        os.chmod(self.socket_path, 0o666)

    async def close(self) -> None:
        self.closed = True
        if self._runner is not None:
            await self._runner.cleanup()

    async def _answer(self, request: web.Request) -> web.Response:
        authorised = request.headers.get("Authorization") == f"Bearer {self._token}"
        self.arrived.append(Arrived(request.method, request.path_qs, authorised))
        await request.read()
        if not authorised:
            return web.Response(status=401, text="the run's door token is required")
        if request.path == "/ready":
            self.ready.set()
        if self.refuse:
            self._auth_failed = True
            return web.Response(status=401, text="the door refused the key")
        return web.Response(text=json.dumps({"door": self.name, "path": request.path}))


@dataclass(slots=True)
class StandInDoors:
    """Factories for `DoorSetup`, remembering every proxy they made."""

    refuse: bool = False
    made: list[StandInDoorProxy] = field(default_factory=list)
    #: Set when the agent calls `/ready` on any of the doors made.
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def coder(self, socket_path: Path) -> StandInDoorProxy:
        proxy = StandInDoorProxy(socket_path, name="coder", refuse=self.refuse, ready=self.ready)
        self.made.append(proxy)
        return proxy

    def decision(self, socket_path: Path) -> StandInDoorProxy:
        proxy = StandInDoorProxy(socket_path, name="decision", ready=self.ready)
        self.made.append(proxy)
        return proxy

    def one(self, name: str) -> StandInDoorProxy:
        return next(proxy for proxy in self.made if proxy.name == name)
