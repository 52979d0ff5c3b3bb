"""How every STAND-IN door serves: on loopback only, under a key, on the port asked (0: any free one), as an
async context manager that starts it and closes it. The doors differ in what they answer, not in how they serve,
so that lives here once; each door says only which application it serves (`_application`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from aiohttp import web

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class LoopbackDoor:
    """A stand-in door's serving: checks its key and host, starts its application, knows its URL, closes.

    A door is a dataclass with the fields `key`, `host`, `port` and `_server` (a `LoopbackServer`)."""

    key: str
    host: str
    port: int
    _server: LoopbackServer
    #: Options of the door's `web.AppRunner` beyond the ones every door has.
    _runner_options: ClassVar[dict[str, Any]] = {}

    @property
    def url(self) -> str:
        return self._server.url

    def _application(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> None:
        if not self.key:
            raise ValueError("the stand-in door needs a key")
        if self.host not in LOOPBACK:
            raise ValueError("the stand-in door binds loopback only")
        await self._server.start(self._application(), self.host, self.port, **self._runner_options)

    async def close(self) -> None:
        await self._server.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


class LoopbackServer:
    """An aiohttp application served on loopback, and its URL once started."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._url = ""

    @property
    def url(self) -> str:
        if not self._url:
            raise RuntimeError("the stand-in door is not started")
        return self._url

    async def start(self, app: web.Application, host: str, port: int, **options: Any) -> None:
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, **options)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound, port = self._runner.addresses[0][:2]
        self._url = f"http://[{bound}]:{port}" if ":" in bound else f"http://{bound}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
