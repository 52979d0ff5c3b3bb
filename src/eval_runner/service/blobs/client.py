"""The runner's Blossom client: fetch a blob by digest from read bases in turn, upload to one write base.

Read bases are tried in order (the relay's own Blossom, an operator's bucket read like Blossom: runner.md
§7.2); a body is taken only if it digests to its name and stays within the bound (by Content-Length and by
the bytes read), and every attempt has a deadline, so a hostile or broken server costs at most that time.
Responses are read raw (no transparent decompression: a small gzip body cannot grow past the bound), and a
redirect is followed only within the same origin (scheme, host, port), at most three times: a server may
canonicalise its paths, and the digest check makes that harmless, but a base is the operator's trust
boundary, and a redirect elsewhere would have the runner make requests to hosts nobody configured.

Upload is wire.md §19.2's NIP-98 variant (HEAD first; `PUT <base>/upload` with a fresh 27235 authorization
each attempt; 429 waits 5 s doubling to 30 s, at most 180 s in all) or, for a standard Blossom server,
the same with a BUD-02 24242 authorization. Every failure is a `BlobError` with a code.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Final, Literal
from urllib.parse import urljoin, urlsplit

import aiohttp

from eval_runner.errors import EvalRunnerError
from eval_runner.nostr.blossom import upload_header
from eval_runner.nostr.keys import SecretKey, is_lower_hex
from eval_runner.nostr.nip98 import authorization_event, header_value
from eval_runner.service.blobs.errors import SEVERITY, BlobCode, BlobError, quoted

logger = logging.getLogger(__name__)

MAX_BLOB_BYTES: Final = 16 * 1024 * 1024
#: One read base's attempt, and a whole fetch over every base.
ATTEMPT_SECONDS: Final = 60.0
FETCH_SECONDS: Final = 120.0
#: One upload request (HEAD or PUT); the 429 patience is the RetryPolicy's.
UPLOAD_ATTEMPT_SECONDS: Final = 120.0
CONNECT_SECONDS: Final = 10.0
MAX_REDIRECTS: Final = 3
#: BUD-02 authorizations this client signs stay open this long.
BUD02_LIFETIME_SECONDS: Final = 300
_MAX_SIGNED: Final = 1_024
_SIGNED_MEMORY_SECONDS: Final = 120
_MAX_DESCRIPTOR_BYTES: Final = 65_536
_MAX_REASON_BYTES: Final = 1_024
_CHUNK: Final = 256 * 1024
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_REFUSALS: Final = {
    400: "refused the upload's headers or body",
    401: "refused the authorization",
    403: "does not let this key upload",
    409: "says this authorization was already used",
}


class AuthScheme(StrEnum):
    """How uploads are authorized: the relay's NIP-98 (27235) or standard Blossom's BUD-02 (24242)."""

    NIP98 = "nip98"
    BUD02 = "bud02"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The 429 backoff: wait `first` s, doubling up to `cap`, for at most `patience` s in all."""

    first: float = 5.0
    cap: float = 30.0
    patience: float = 180.0


@dataclass(frozen=True, slots=True)
class Upload:
    """What an upload did: `present` (the store had it; nothing sent), `created` (201) or `stored` (200)."""

    url: str
    sha256: str
    size: int
    type: str
    outcome: Literal["present", "created", "stored"]


def base_from_relay(relay_url: str) -> str:
    """The relay's own Blossom base: `wss://host` → `https://host`, `ws://` → `http://`, path dropped."""
    parts = urlsplit(relay_url)
    scheme = {"wss": "https", "ws": "http", "https": "https", "http": "http"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise BlobError("invalid_argument", f"{relay_url!r} is not a ws:// or wss:// relay URL")
    return f"{scheme}://{parts.netloc}"


def sha256_hex(digest: str) -> str:
    """`sha256:<hex>` or bare hex → the 64 lowercase hex characters a blob is named by."""
    hex_digest = digest.removeprefix("sha256:")
    if not is_lower_hex(hex_digest, 64):
        raise BlobError("invalid_argument", f"{digest[:80]!r} is not a sha256 digest")
    return hex_digest


def _base(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BlobError("invalid_argument", f"{url!r} is not an http(s) base URL")
    return url.rstrip("/")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


class _AttemptError(EvalRunnerError):
    """One attempt's failure, kept with its code until the whole operation decides what to raise."""

    def __init__(self, code: BlobCode, detail: str, *, reused: bool = False) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail
        self.reused = reused


class BlobStore:
    """Blossom blobs for the runner: `fetch(digest)`, `has(digest)`, `upload(data, media_type)`.

    `read_bases` are tried in order; `write_base` takes uploads, signed by `secret` with `auth`. The session
    is made on first use (or passed in, then left open by `close`). `sleep` and `clock` are for tests.
    """

    def __init__(
        self,
        read_bases: Sequence[str],
        write_base: str | None = None,
        secret: SecretKey | None = None,
        *,
        auth: AuthScheme = AuthScheme.NIP98,
        max_bytes: int = MAX_BLOB_BYTES,
        attempt_seconds: float = ATTEMPT_SECONDS,
        fetch_seconds: float = FETCH_SECONDS,
        upload_attempt_seconds: float = UPLOAD_ATTEMPT_SECONDS,
        retry: RetryPolicy | None = None,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.read_bases = tuple(_base(base) for base in read_bases)
        self.write_base = _base(write_base) if write_base is not None else None
        if self.write_base is not None and secret is None:
            raise BlobError("invalid_argument", "a write base needs the key that signs uploads")
        self._secret = secret
        self.auth = AuthScheme(auth)
        self.max_bytes = max_bytes
        self.attempt_seconds = attempt_seconds
        self.fetch_seconds = fetch_seconds
        self.upload_attempt_seconds = upload_attempt_seconds
        self.retry = retry or RetryPolicy()
        self._session = session
        self._owns_session = session is None
        self._clock = clock
        self._sleep = sleep
        self._signed: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"BlobStore(read={list(self.read_bases)!r}, write={self.write_base!r}, auth={self.auth.value!r})"

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    async def __aenter__(self) -> BlobStore:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS),
                headers={"Accept-Encoding": "identity", "User-Agent": "eval-runner"},
            )
            self._owns_session = True
        return self._session

    # -- fetch -----------------------------------------------------------------------------------------

    async def fetch(self, digest: str) -> bytes:
        """The blob's bytes from the first read base that has them, checked against `digest`."""
        hex_digest = sha256_hex(digest)
        if not self.read_bases:
            raise BlobError("content_unavailable", f"sha256:{hex_digest} has no store to come from")
        failures: list[tuple[str, _AttemptError]] = []
        deadline = self._clock() + self.fetch_seconds
        for base in self.read_bases:
            remaining = deadline - self._clock()
            if remaining <= 0:
                failures.append((base, _AttemptError("unavailable", "not tried: the fetch ran out of time")))
                continue
            try:
                async with asyncio.timeout(min(self.attempt_seconds, remaining)):
                    return await self._get(base, hex_digest)
            except _AttemptError as failure:
                failures.append((base, failure))
            except TimeoutError:
                failures.append((base, _AttemptError("unavailable", "did not answer in time")))
            except (aiohttp.ClientError, OSError, ValueError) as error:
                failures.append((base, _AttemptError("unavailable", _network(error))))
        code = min((failure.code for _, failure in failures), key=SEVERITY.index)
        tried = "; ".join(f"{base}: {failure.detail}" for base, failure in failures)
        raise BlobError(code, f"sha256:{hex_digest} could not be fetched ({tried})")

    async def _get(self, base: str, hex_digest: str) -> bytes:
        async with self._request("GET", f"{base}/{hex_digest}") as response:
            if response.status == 404:
                raise _AttemptError("content_unavailable", "not found")
            if response.status != 200:
                raise _AttemptError("unavailable", f"answered HTTP {response.status}")
            if response.content_length is not None and response.content_length > self.max_bytes:
                raise _AttemptError("too_large", f"offers {response.content_length} bytes, over {self.max_bytes}")
            body = await _read_bounded(response, self.max_bytes)
            if body is None:
                raise _AttemptError("too_large", f"sent more than {self.max_bytes} bytes")
        if hashlib.sha256(body).hexdigest() != hex_digest:
            raise _AttemptError("identity_mismatch", "sent bytes that do not digest to their name")
        return body

    async def has(self, digest: str) -> bool:
        """True when a read base answers `HEAD` with 2xx (each base bounded like a fetch attempt)."""
        hex_digest = sha256_hex(digest)
        for base in self.read_bases:
            if await self._present(base, hex_digest):
                return True
        return False

    async def _present(self, base: str, hex_digest: str) -> bool:
        try:
            async with asyncio.timeout(self.attempt_seconds):
                async with self._request("HEAD", f"{base}/{hex_digest}") as response:
                    return 200 <= response.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, _AttemptError):
            return False

    def _request(
        self, method: str, url: str, headers: dict[str, str] | None = None, data: bytes | None = None
    ) -> _Redirecting:
        return _Redirecting(self._client(), method, url, headers, data)

    # -- upload ----------------------------------------------------------------------------------------

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload:
        """Store `data` at the write base unless it already has it (wire.md §19.2)."""
        if self.write_base is None or self._secret is None:
            raise BlobError("invalid_argument", "this blob store has no write base")
        base, hex_digest = self.write_base, hashlib.sha256(data).hexdigest()
        media_type = media_type.strip().lower()
        if not media_type or "/" not in media_type or not media_type.isascii():
            raise BlobError("invalid_argument", f"{media_type[:80]!r} is not a media type")
        if len(data) > self.max_bytes:
            raise BlobError("too_large", f"sha256:{hex_digest} is {len(data)} bytes, over {self.max_bytes}")
        if await self._present(base, hex_digest):
            return Upload(f"{base}/{hex_digest}", hex_digest, len(data), media_type, "present")
        started, wait = self._clock(), self.retry.first
        while True:
            try:
                async with asyncio.timeout(self.upload_attempt_seconds):
                    done = await self._put(base, hex_digest, data, media_type)
            except _AttemptError as failure:
                if failure.reused and await self._present(base, hex_digest):
                    # An identical authorization (same key, blob and second) went first: the blob is there.
                    return Upload(f"{base}/{hex_digest}", hex_digest, len(data), media_type, "present")
                raise BlobError(failure.code, f"{base} could not take sha256:{hex_digest}: {failure.detail}") from None
            except TimeoutError:
                raise BlobError("unavailable", f"{base} did not take sha256:{hex_digest} in time") from None
            except (aiohttp.ClientError, OSError, ValueError) as error:
                raise BlobError(
                    "unavailable", f"{base} could not take sha256:{hex_digest}: {_network(error)}"
                ) from None
            if done is not None:
                logger.debug("blobs: uploaded sha256:%s to %s", hex_digest, base)
                return done
            if self._clock() - started + wait > self.retry.patience:
                raise BlobError(
                    "rate_limited", f"{base} kept answering 429 for sha256:{hex_digest}; gave up after the patience"
                )
            await self._sleep(wait)
            wait = min(wait * 2, self.retry.cap)

    def _authorization(self, base: str, hex_digest: str) -> str:
        """A fresh authorization: its `created_at` is past any this store signed for the blob, so its event id
        differs even within one second (a server refuses a reused id with 409)."""
        assert self._secret is not None
        now = max(int(self._clock()), self._signed.get(hex_digest, 0) + 1)
        if len(self._signed) >= _MAX_SIGNED:
            self._signed = {digest: at for digest, at in self._signed.items() if at > now - _SIGNED_MEMORY_SECONDS}
        self._signed[hex_digest] = now
        if self.auth is AuthScheme.BUD02:
            return upload_header(self._secret, hex_digest, now, now + BUD02_LIFETIME_SECONDS)
        return header_value(authorization_event(self._secret, f"{base}/upload", "PUT", hex_digest, now))

    async def _put(self, base: str, hex_digest: str, data: bytes, media_type: str) -> Upload | None:
        """One attempt with a fresh authorization; None on 429."""
        headers = {
            "Authorization": self._authorization(base, hex_digest),
            "X-SHA-256": hex_digest,
            "Content-Type": media_type,
        }
        async with self._request("PUT", f"{base}/upload", headers, data) as response:
            status = response.status
            if status == 429:
                return None
            if status in (200, 201):
                text = await _read_bounded(response, _MAX_DESCRIPTOR_BYTES)
                return _descriptor(text, f"{base}/{hex_digest}", hex_digest, len(data), media_type, status)
            reason = await _reason(response)
        if status == 413:
            raise _AttemptError("too_large", f"answered 413{reason}")
        if status in _REFUSALS or 400 <= status < 500:
            detail = f"{_REFUSALS.get(status, 'refused it')} (HTTP {status}){reason}"
            raise _AttemptError("refused", detail, reused=status == 409)
        raise _AttemptError("unavailable", f"answered HTTP {status}{reason}")


def _descriptor(text: bytes | None, blob_url: str, hex_digest: str, size: int, media_type: str, status: int) -> Upload:
    """The upload's record from a BUD-02 descriptor, which must name these bytes (sha256 and size)."""
    if text is None:
        raise _AttemptError("unavailable", "answered with a descriptor over 64 KiB")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _AttemptError("unavailable", "answered with a descriptor that is not JSON") from None
    if not isinstance(value, dict):
        raise _AttemptError("unavailable", "answered with a descriptor that is not a JSON object")
    if value.get("sha256") != hex_digest or value.get("size") != size or type(value.get("size")) is not int:
        raise _AttemptError("identity_mismatch", "answered with a descriptor for other bytes")
    url = value.get("url")
    kind = value.get("type")
    return Upload(
        url if isinstance(url, str) and url else blob_url,
        hex_digest,
        size,
        kind if isinstance(kind, str) else media_type,
        "created" if status == 201 else "stored",
    )


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None once it passes `limit` bytes (reading stops there)."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def _reason(response: aiohttp.ClientResponse) -> str:
    """`: 'message'` from a BUD-01 refusal (X-Reason, else the JSON body's `message`), quoted; or ''."""
    text = response.headers.get("X-Reason")
    if text is None:
        body = await _read_bounded(response, _MAX_REASON_BYTES)
        try:
            value = json.loads(body or b"")
        except (ValueError, RecursionError):
            value = None
        message = value.get("message") if isinstance(value, dict) else None
        text = message if isinstance(message, str) else None
    return f": {quoted(text)}" if text else ""


def _network(error: BaseException) -> str:
    if isinstance(error, aiohttp.ClientResponseError):
        return f"answered with a response that could not be read (HTTP {error.status})"
    if isinstance(error, aiohttp.ClientConnectionError | OSError):
        return "could not be reached"
    return f"failed ({type(error).__name__})"


class _Redirecting:
    """An aiohttp request that follows same-origin redirects only (at most MAX_REDIRECTS)."""

    def __init__(
        self, session: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str] | None, data: bytes | None
    ) -> None:
        self._session = session
        self._method = method
        self._url = url
        self._headers = headers
        self._data = data
        self._response: aiohttp.ClientResponse | None = None

    async def __aenter__(self) -> aiohttp.ClientResponse:
        url = self._url
        origin = _origin(url)
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._session.request(
                self._method, url, headers=self._headers, data=self._data, allow_redirects=False
            )
            if response.status not in _REDIRECTS or self._method == "PUT":
                self._response = response
                return response
            location = response.headers.get("Location", "")
            response.release()
            target = urljoin(url, location)
            if not location or _origin(target) != origin:
                raise _AttemptError("unavailable", "redirected to another host (not followed)")
            url = target
        raise _AttemptError("unavailable", f"redirected more than {MAX_REDIRECTS} times")

    async def __aexit__(self, *exc_info: object) -> None:
        if self._response is not None:
            self._response.release()
