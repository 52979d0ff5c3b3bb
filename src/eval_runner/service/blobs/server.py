"""The embedded Blossom server: `GET`/`HEAD /<sha256>` and `PUT /upload` over a content-addressed directory.

The runner's default blob store when no `EVAL_RUNNER_BLOSSOM` is set, as the embedded relay is its default
relay. Uploads take the relay's NIP-98 authorization (wire.md §19.2) and BUD-02's kind 24242 (so standard
Blossom clients work), each event once, from an allowed key only (by default the runner's own). Everything
a request can get wrong is refused before the body is read where it can be (size by Content-Length,
authorization, allowlist, headers, reuse) and the body is read to a bound under a deadline; a blob is
stored only once its bytes digest to the hash the authorization names. Refusals are BUD-01 style: JSON
`{"message": …}` and `X-Reason`.

Used authorization ids are remembered in memory for as long as each event would be accepted (27235:
created_at + 60 s; 24242: its expiration, at most a day away). A restart forgets them; what a replayed
authorization could then do is store the very bytes it was signed for again (decisions.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Final, Literal

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from eval_runner.errors import EvalRunnerError
from eval_runner.nostr.blossom import MAX_LIFETIME_SECONDS, BlossomAuthError, read_upload_authorization
from eval_runner.nostr.keys import is_lower_hex
from eval_runner.nostr.nip98 import WINDOW_SECONDS
from eval_runner.service.blobs.files import BlobFiles, StoredBlob

logger = logging.getLogger(__name__)

MAX_BLOB_BYTES: Final = 16 * 1024 * 1024
#: How long one upload's body may take to arrive.
BODY_DEADLINE_SECONDS: Final = 120.0
#: Used authorizations remembered at once; past it uploads are refused 429 until some lapse.
MAX_REMEMBERED: Final = 65_536
_NAME: Final = re.compile(r"([0-9a-f]{64})(?:\.[0-9A-Za-z]{1,16})?")
_MEDIA_TYPE: Final = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
_CORS: Final = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "Authorization, *",
    "Access-Control-Allow-Methods": "GET, HEAD, PUT",
    "Access-Control-Expose-Headers": "*",
}
Claim = Literal["fresh", "reused", "full"]


class UsedAuthorizations:
    """Event ids already used, each kept until its event would be refused anyway."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._limit = limit
        self._until: dict[str, int] = {}
        self._expiry: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._until)

    def claim(self, event_id: str, valid_until: int, now: int) -> Claim:
        """Record `event_id` as used unless it already is (`reused`) or the memory is full (`full`)."""
        while self._expiry and self._expiry[0][0] < now:
            _, lapsed = heapq.heappop(self._expiry)
            self._until.pop(lapsed, None)
        if event_id in self._until:
            return "reused"
        if len(self._until) >= self._limit:
            return "full"
        self._until[event_id] = valid_until
        heapq.heappush(self._expiry, (valid_until, event_id))
        return "fresh"


class _TooLargeError(EvalRunnerError):
    """The body passed the bound while it was read (internal: answered 413)."""


def _refusal(status: int, message: str) -> web.Response:
    response = web.json_response({"message": message}, status=status, headers={"X-Reason": message})
    if status in (408, 413):
        response.force_close()  # the rest of the body is not read
    return response


def _media_type(value: str | None) -> str | None:
    """The lowercase `type/subtype` of a Content-Type (parameters dropped), or None when it is not one."""
    if value is None:
        return None
    essence = value.split(";", 1)[0].strip().lower()
    return essence if _MEDIA_TYPE.fullmatch(essence) else None


async def _read_body(request: web.Request, limit: int) -> bytes:
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise _TooLargeError
    return bytes(body)


class BlobService:
    """The request handlers and their state; `application()` is the aiohttp app that serves them."""

    def __init__(
        self,
        files: BlobFiles,
        allowed: Iterable[str],
        *,
        max_bytes: int = MAX_BLOB_BYTES,
        window: int = WINDOW_SECONDS,
        max_lifetime: int = MAX_LIFETIME_SECONDS,
        body_deadline: float = BODY_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
        used: UsedAuthorizations | None = None,
    ) -> None:
        self.files = files
        self.allowed = frozenset(allowed)
        if not all(is_lower_hex(key, 64) for key in self.allowed):
            raise ValueError("allowed uploaders are 64 lowercase hex public keys")
        self.max_bytes = max_bytes
        self.window = window
        self.max_lifetime = max_lifetime
        self.body_deadline = body_deadline
        self.clock = clock
        self.used = used if used is not None else UsedAuthorizations()
        self.public_url = ""  # set by whoever serves the app, before the first request

    @property
    def upload_url(self) -> str:
        return f"{self.public_url}/upload"

    def application(self) -> web.Application:
        app = web.Application(middlewares=[_json_errors])
        app.on_response_prepare.append(_add_cors)
        app.router.add_route("PUT", "/upload", self.upload)
        app.router.add_route("HEAD", "/upload", self.upload_requirements)
        app.router.add_route("OPTIONS", "/{tail:.*}", _preflight)
        app.router.add_get("/{name}", self.blob)  # HEAD too
        return app

    async def blob(self, request: web.Request) -> web.StreamResponse:
        """BUD-01 `GET`/`HEAD /<sha256>[.ext]`: the bytes with their uploaded type, or 404."""
        match = _NAME.fullmatch(request.match_info["name"])
        stored = self.files.find(match.group(1)) if match else None
        if stored is None:
            return _refusal(404, "no such blob")
        headers = {"Content-Type": stored.type, "X-SHA-256": stored.sha256, "Cache-Control": "public, immutable"}
        return web.FileResponse(stored.path, headers=headers)

    async def upload_requirements(self, request: web.Request) -> web.Response:
        """BUD-06 `HEAD /upload`: would an upload of `X-Content-Length` bytes be taken (auth aside)?"""
        declared = request.headers.get("X-Content-Length", "")
        digits = declared.lstrip("0")
        if declared.isascii() and declared.isdigit() and (len(digits) > 18 or int(digits or "0") > self.max_bytes):
            return _refusal(413, f"blobs are at most {self.max_bytes} bytes")
        return web.Response(status=200)

    async def upload(self, request: web.Request) -> web.Response:
        """`PUT /upload` (wire.md §19.2, and BUD-02 with a 24242 authorization)."""
        now = int(self.clock())
        length = request.content_length
        if length is not None and length > self.max_bytes:
            return _refusal(413, f"blobs are at most {self.max_bytes} bytes")
        header = request.headers.get("Authorization")
        if header is None:
            return _refusal(401, "an upload needs an Authorization header")
        try:
            auth = read_upload_authorization(header, self.upload_url, now, self.window, self.max_lifetime)
        except BlossomAuthError as error:
            return _refusal(401, f"the authorization does not hold: {error.message}")
        if auth.pubkey not in self.allowed:
            return _refusal(403, "this key may not upload here")
        media_type = _media_type(request.headers.get("Content-Type"))
        if media_type is None:
            return _refusal(400, "Content-Type must be a media type")
        declared = request.headers.get("X-SHA-256")
        if declared is not None and not is_lower_hex(declared.strip().lower(), 64):
            return _refusal(400, "X-SHA-256 must be 64 hex characters")
        claim = self.used.claim(auth.event_id, auth.valid_until, now)
        if claim == "reused":
            return _refusal(409, "this authorization was already used")
        if claim == "full":
            return _refusal(429, "too many uploads at once; try again later")
        try:
            async with asyncio.timeout(self.body_deadline):
                body = await _read_body(request, self.max_bytes)
        except _TooLargeError:
            return _refusal(413, f"blobs are at most {self.max_bytes} bytes")
        except TimeoutError:
            return _refusal(408, "the body did not arrive in time")
        except (ConnectionError, HttpProcessingError):  # the client went away or broke the framing
            return _refusal(400, "the body did not arrive whole")
        if length is not None and len(body) != length:
            return _refusal(400, "the body is shorter than its Content-Length")
        digest = hashlib.sha256(body).hexdigest()
        if declared is not None and declared.strip().lower() != digest:
            return _refusal(400, "X-SHA-256 does not match the body")
        if digest not in auth.hashes:
            return _refusal(401, "the authorization names other bytes than the body")
        try:
            stored, created = await asyncio.to_thread(self.files.store, digest, body, media_type)
        except OSError as error:
            logger.warning("blobs: could not store sha256:%s: %s", digest, error.strerror or type(error).__name__)
            return _refusal(503, "the blob could not be stored")
        if created:
            logger.debug("blobs: stored sha256:%s (%d bytes)", digest, stored.size)
        return web.json_response(
            self.descriptor(stored), status=201 if created else 200, headers={"X-SHA-256": stored.sha256}
        )

    def descriptor(self, stored: StoredBlob) -> dict[str, object]:
        """The BUD-02 blob descriptor with wire.md §19.2's `nip94` tags."""
        url = f"{self.public_url}/{stored.sha256}"
        return {
            "url": url,
            "sha256": stored.sha256,
            "size": stored.size,
            "type": stored.type,
            "uploaded": stored.uploaded,
            "nip94": [["url", url], ["m", stored.type], ["x", stored.sha256], ["size", str(stored.size)]],
        }


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 4xx (no route, wrong method) as BUD-01 JSON refusals."""
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return _refusal(error.status, error.reason)


async def _add_cors(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(_CORS)


async def _preflight(request: web.Request) -> web.Response:
    return web.Response(status=204)


def _origin(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class BlobServer:
    """The embedded Blossom server on a TCP port: `await start()`, `url`, `await close()` (or `async with`).

    `root` is the blob directory (e.g. `<state>/blobs`); `allowed` the hex public keys that may upload (the
    runner passes its own); `public_url` the base URL clients use when a reverse proxy stands in front (a
    27235's `u` must be `<public_url>/upload`), by default `http://<host>:<port>`.
    """

    def __init__(
        self,
        root: Path,
        allowed: Iterable[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
        max_bytes: int = MAX_BLOB_BYTES,
        window: int = WINDOW_SECONDS,
        body_deadline: float = BODY_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.files = BlobFiles(root)
        self.service = BlobService(
            self.files, allowed, max_bytes=max_bytes, window=window, body_deadline=body_deadline, clock=clock
        )
        self._host = host
        self._port = port
        self._public_url = public_url.rstrip("/") if public_url else None
        self._runner: web.AppRunner | None = None
        self._url = ""
        self._listening = ""

    @property
    def url(self) -> str:
        """The base URL blobs are named under (`<url>/<sha256>`); set once started."""
        if not self._url:
            raise RuntimeError("the blob server has not started")
        return self._url

    @property
    def listening_url(self) -> str:
        """Where it listens (`http://<host>:<port>`), the same as `url` unless a public URL was given."""
        if not self._listening:
            raise RuntimeError("the blob server has not started")
        return self._listening

    @property
    def upload_url(self) -> str:
        return self.service.upload_url

    async def start(self) -> None:
        dropped = await asyncio.to_thread(self.files.prepare)
        if dropped:
            logger.info("blobs: dropped %d unfinished upload(s) left by a crash", dropped)
        runner = web.AppRunner(self.service.application(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._listening = _origin(self._host, self._port or _bound_port(runner))
        self._url = self._public_url or self._listening
        self.service.public_url = self._url
        logger.debug("blobs: serving %s at %s", self.files.root, self._url)

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> BlobServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[1], int):
            return address[1]
    raise RuntimeError("the blob server is not listening on a TCP port")
