"""The per-run door proxy: the only way a run's agent reaches its model door, and never with the key.

The agent is untrusted code in a sandbox with its network off. A bridge inside the sandbox listens on
`127.0.0.1:<port>` and relays to a Unix socket bind-mounted from the host; this proxy listens on that
socket. The agent is given the bridge's URL and a fresh random token (32 random bytes, hex) as its
door key. A request whose `Authorization: Bearer <token>` (scheme in any case) or `x-api-key: <token>`
matches goes on to the real door URL + the same path and query, with the credential replaced by the
real key as `Authorization: Bearer <key>` and hop-by-hop headers dropped; the answer streams back
unbuffered (server-sent events pass through as they arrive). So the key never enters the sandbox, and
the token is worthless once the run ends (runner.md §13.4 step 7).

Answers of the proxy's own: 401 "the run's door token is required" (wrong or missing token, nothing
forwarded), 413 (body over the cap, 16 MiB), 502 (the door cannot be reached). It remembers whether the
door ever answered 401 or 403, which makes the run `errored(auth_failed)` (step 11).

The socket file is made 0666 so a sandbox running as another uid (65534) can connect; put it in a
directory only this run uses — whoever can reach the file can spend the door through it. Nothing here
logs, and neither the key nor the token appears in a repr or an error message.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

BODY_LIMIT = 16 * 1024 * 1024
TOKEN_REQUIRED = "the run's door token is required"  # noqa: S105 - a message, not a credential
TOO_LARGE = "the request body is larger than the door proxy forwards"
UNREACHABLE = "the door did not answer"
#: Seconds to open a connection to the door; an answer itself may take as long as the run's deadline.
CONNECT_SECONDS = 30.0
#: Seconds `close()` lets an answer still in flight finish; the run is over, so not aiohttp's 60.
SHUTDOWN_SECONDS = 1.0

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Never forwarded upstream: framing the proxy redoes, and the run's credential.
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "expect", "authorization", "x-api-key"}
# Headers aiohttp would invent; the agent's own are forwarded instead, so the door answers what it asked.
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
_SUN_PATH_MAX = 107
_READ_CHUNK = 64 * 1024


class DoorProxyError(Exception):
    """The proxy cannot be set up as asked (bad door URL, socket path taken or too long)."""


class DoorProxy:
    """One run's door proxy on a Unix socket. `await start()`, hand out `token`, `await close()`."""

    def __init__(
        self,
        upstream_url: str,
        upstream_key: str,
        socket_path: Path | str,
        *,
        body_limit: int = BODY_LIMIT,
    ) -> None:
        parsed = URL(upstream_url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise DoorProxyError("the door URL must be http or https and name a host")
        if parsed.user is not None or parsed.password is not None or parsed.query_string or parsed.fragment:
            raise DoorProxyError("the door URL must carry no credentials, query or fragment")
        if not upstream_key:
            raise DoorProxyError("the door key is empty")
        if body_limit < 0:
            raise DoorProxyError("the body limit cannot be negative")
        path = Path(socket_path)
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            raise DoorProxyError(f"the socket path is longer than {_SUN_PATH_MAX} bytes: {path}")
        self._upstream = upstream_url.rstrip("/")
        self._key = upstream_key
        self._socket_path = path
        self._body_limit = body_limit
        self._token = secrets.token_hex(32)
        self._auth_failed = False
        self._forwarded = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"DoorProxy(socket_path={str(self._socket_path)!r})"

    @property
    def token(self) -> str:
        """The run's door token: the agent's `CODER_DOOR_KEY`. Secret; scrub it from kept bytes."""
        return self._token

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    @property
    def auth_failed(self) -> bool:
        """Whether the door ever answered 401 or 403."""
        return self._auth_failed

    @property
    def forwarded(self) -> int:
        """How many requests carried the token and were sent on to the door."""
        return self._forwarded

    async def start(self) -> None:
        if self._runner is not None:
            raise DoorProxyError("the door proxy is already started")
        if self._socket_path.exists() or self._socket_path.is_symlink():
            raise DoorProxyError(f"{self._socket_path} already exists")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS),
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        try:
            await web.UnixSite(runner, str(self._socket_path)).start()
            # Another uid (the sandbox) must connect; the run-only directory is the boundary.
            os.chmod(self._socket_path, 0o666)  # noqa: S103
        except OSError as exc:
            await runner.cleanup()
            await session.close()
            raise DoorProxyError(f"cannot listen on {self._socket_path}: {exc.strerror}") from None
        self._runner, self._session = runner, session

    async def close(self) -> None:
        runner, session = self._runner, self._session
        self._runner = self._session = None
        if session is not None:
            await session.close()  # first, so a handler still waiting on the door ends at once
        if runner is not None:
            await runner.cleanup()
        try:
            if stat.S_ISSOCK(os.lstat(self._socket_path).st_mode):
                os.unlink(self._socket_path)
        except FileNotFoundError:
            pass

    async def __aenter__(self) -> DoorProxy:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -------------------------------------------------------------------------------------------------

    def _presents_token(self, headers: CIMultiDictProxy[str]) -> bool:
        for value in headers.getall("Authorization", ()):
            scheme, _, credential = value.strip().partition(" ")
            if scheme.lower() == "bearer" and self._is_token(credential.strip()):
                return True
        return any(self._is_token(value.strip()) for value in headers.getall("x-api-key", ()))

    def _is_token(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), self._token.encode("ascii"))

    async def _read_body(self, request: web.Request) -> bytes | None:
        """The whole body, or None when it is over the cap (by its declared length or as it arrives)."""
        if request.content_length is not None and request.content_length > self._body_limit:
            return None
        parts: list[bytes] = []
        size = 0
        while chunk := await request.content.read(_READ_CHUNK):
            size += len(chunk)
            if size > self._body_limit:
                return None
            parts.append(chunk)
        return b"".join(parts)

    def _upstream_headers(self, headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
        named = _connection_named(headers)
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in headers.items():
            if name.lower() not in _NOT_FORWARDED and name.lower() not in named:
                out.add(name, value)
        out["Authorization"] = f"Bearer {self._key}"
        return out

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        session = self._session
        if session is None or not self._presents_token(request.headers):
            return web.Response(status=401, text=TOKEN_REQUIRED)
        body = await self._read_body(request)
        if body is None:
            refused = web.Response(status=413, text=TOO_LARGE)
            refused.force_close()
            return refused
        self._forwarded += 1
        try:
            upstream = await session.request(
                request.method,
                URL(self._upstream + request.raw_path, encoded=True),
                headers=self._upstream_headers(request.headers),
                data=body or None,
                allow_redirects=False,
                skip_auto_headers=_NO_AUTO_HEADERS,
            )
        except (aiohttp.ClientError, TimeoutError, OSError):
            return web.Response(status=502, text=UNREACHABLE)
        try:
            if upstream.status in (401, 403):
                self._auth_failed = True
            named = _connection_named(upstream.headers)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length" and name.lower() not in named:
                    response.headers.add(name, value)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except (aiohttp.ClientError, TimeoutError, OSError):
                # The door broke off mid-answer: break the agent's connection too, so a cut answer
                # never arrives looking whole.
                if request.transport is not None:
                    request.transport.abort()
                return response
            await response.write_eof()
            return response
        finally:
            upstream.release()


def _connection_named(headers: CIMultiDictProxy[str]) -> set[str]:
    """Headers a `Connection` header names are hop-by-hop for this connection only (RFC 9110 §7.6.1)."""
    return {token.strip().lower() for value in headers.getall("Connection", ()) for token in value.split(",")}
