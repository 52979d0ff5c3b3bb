"""The per-run door proxy: the only way a run's agent reaches its model door, and never with the key.

The agent is untrusted code in a sandbox with its network off. The bridge inside relays
`127.0.0.1:<port>` to a Unix socket bind-mounted from the host, where this proxy listens; the agent's
door key is a fresh token that the proxy swaps for the real key on the way out (runner.md §13.4 step 7),
so the key never enters the sandbox and the token is worthless once the run ends. The key goes where the
agent put the token: `x-api-key` (Anthropic's Messages API, Claude Code) or a bearer token (OpenAI's
Responses and Chat Completions); what the door's answers report they used is summed (`door_usage.py`).
Answers stream back
scrubbed of every form of the key, without `Content-Length` (scrubbing changes the length). What is
forwarded, dropped, decoded and scrubbed is in decisions.md ("The door proxy, the stand-ins and ATIF
reading"). Nothing here logs, and neither the key nor the token appears in a repr or an error message.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import re
import secrets
import stat
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from eval_runner.engine.run.collect import REDACTED
from eval_runner.engine.run.door_usage import AnswerReader, DoorUsage
from eval_runner.errors import EvalRunnerError

BODY_LIMIT = 16 * 1024 * 1024
TOKEN_REQUIRED = "the run's door token is required"  # noqa: S105 - a message, not a credential
TOO_LARGE = "the request body is larger than the door proxy forwards"
UNREACHABLE = "the door did not answer"
UNREADABLE = "the door answered in a coding the proxy cannot read"
#: Seconds to open a connection to the door; an answer itself may take as long as the run's deadline.
CONNECT_SECONDS = 30.0
#: Seconds `close()` lets an answer still in flight finish; the run is over, so not aiohttp's 60.
SHUTDOWN_SECONDS = 1.0
#: Fewest base64 characters of the key worth scrubbing; shorter runs are ordinary text too often.
MIN_BASE64_RUN = 8

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
# Never forwarded upstream: framing the proxy redoes, the run's credential, and the agent's choice of
# codings (the door is asked for identity, which a byte scrub can read).
_NOT_FORWARDED = _HOP_BY_HOP | {"host", "content-length", "expect", "authorization", "x-api-key", "accept-encoding"}
# Headers aiohttp would invent; the agent's own are forwarded instead, so the door answers what it asked.
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
# Answer headers that carry a credential whatever their value; never passed back to the agent.
_CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "set-cookie2",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "authentication-info",
        "proxy-authentication-info",
    }
)
# Content codings aiohttp decodes whatever extras are installed; the proxy passes them on decoded.
_DECODED = frozenset({"gzip", "deflate"})
_SUN_PATH_MAX = 107
_READ_CHUNK = 64 * 1024


def key_forms(key: str) -> tuple[bytes, ...]:
    """The byte strings that give `key` away in an answer (module docstring), longest first."""
    text_forms = {
        key,
        json.dumps(key)[1:-1],
        json.dumps(key, ensure_ascii=False)[1:-1],
        json.dumps(key)[1:-1].replace("/", "\\/"),
        urllib.parse.quote(key, safe=""),
    }
    if all(c in "0123456789abcdefABCDEF" for c in key):
        text_forms |= {key.lower(), key.upper()}
    raw = key.encode("utf-8", "surrogateescape")
    forms = {form.encode("utf-8", "surrogateescape") for form in text_forms}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms |= {encode(raw), encode(raw).rstrip(b"=")}
        for lead in range(3):
            # Characters wholly made of key bits when the key starts `lead` bytes into a base64 group.
            first, end = -(-8 * lead // 6), 8 * (lead + len(raw)) // 6
            run = encode(bytes(lead) + raw)[first:end]
            if len(run) >= MIN_BASE64_RUN:
                forms.add(run)
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


class KeyScrub:
    """What gives the door key away, compiled once per proxy; `answer()` scrubs one streamed answer."""

    __slots__ = ("_longest", "_pattern", "_prefixes", "_starts", "_telltales", "forms")

    def __init__(self, forms: Iterable[bytes]) -> None:
        self.forms = tuple(sorted({form for form in forms if form}, key=lambda form: (-len(form), form)))
        if not self.forms:
            raise ValueError("nothing to scrub")
        # Longest first, so at each position the regex takes the longest form (leftmost-longest).
        self._pattern = re.compile(b"|".join(re.escape(form) for form in self.forms))
        # Every match holds one of these, so their absence (a fast `in`) proves there is none.
        self._telltales = tuple(
            form for form in self.forms if not any(other in form for other in self.forms if other != form)
        )
        self._prefixes = frozenset(form[:size] for form in self.forms for size in range(1, len(form)))
        self._starts = frozenset(form[0] for form in self.forms)
        self._longest = len(self.forms[0])

    def __repr__(self) -> str:
        return f"KeyScrub({len(self.forms)} forms)"

    def found_in(self, data: bytes) -> bool:
        return any(telltale in data for telltale in self._telltales)

    def whole(self, data: bytes) -> bytes:
        return self._pattern.sub(REDACTED, data) if self.found_in(data) else data

    def answer(self) -> AnswerScrub:
        return AnswerScrub(self)

    def _search(self, data: bytes, pos: int) -> re.Match[bytes] | None:
        """The leftmost-longest form from `pos`, the regex started just before the first telltale."""
        found = [at for telltale in self._telltales if (at := data.find(telltale, pos)) >= 0]
        if not found:
            return None
        # A form holding a telltale at `at` starts no earlier than the longest form allows.
        return self._pattern.search(data, max(pos, min(found) - self._longest + 1))

    def _undecided(self, data: bytes, pos: int) -> int:
        """The first position from `pos` where what follows could still become a form of the key."""
        for at in range(max(pos, len(data) - self._longest + 1), len(data)):
            if data[at] in self._starts and data[at:] in self._prefixes:
                return at
        return len(data)

    def _feed(self, data: bytes) -> tuple[bytes, bytes]:
        """`data` scrubbed as far as it can be, and the tail held back until more arrives."""
        parts: list[bytes] = []
        pos = 0
        while True:
            undecided = self._undecided(data, pos)
            match = self._search(data, pos)
            if match is None or match.start() >= undecided:
                parts.append(data[pos:undecided])
                return b"".join(parts), data[undecided:]
            parts += (data[pos : match.start()], REDACTED)
            pos = match.end()


class AnswerScrub:
    """One answer's scrub: the bytes `feed` and `finish` return, joined, equal `KeyScrub.whole` of the
    bytes fed, however they were split, and no more than the longest form less one byte is ever held."""

    __slots__ = ("_held", "_scrub")

    def __init__(self, scrub: KeyScrub) -> None:
        self._scrub = scrub
        self._held = b""

    @property
    def withheld(self) -> int:
        """Bytes fed but not yet returned: a tail that may still become a form of the key."""
        return len(self._held)

    def feed(self, chunk: bytes) -> bytes:
        out, self._held = self._scrub._feed(self._held + chunk)
        return out

    def finish(self) -> bytes:
        """The held tail, scrubbed: the answer has ended, so it can become nothing more."""
        held, self._held = self._held, b""
        return self._scrub.whole(held)


class DoorProxyError(EvalRunnerError):
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
        self._scrub = KeyScrub(key_forms(upstream_key))
        self._socket_path = path
        self._body_limit = body_limit
        self._token = secrets.token_hex(32)
        self._auth_failed = False
        self._forwarded = 0
        self._usage = DoorUsage()
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
    def usage(self) -> DoorUsage:
        """Tokens and cost the door's successful answers reported (`door_usage.py`)."""
        return self._usage

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
            auto_decompress=True,  # gzip and deflate only; `_answer_coding` refuses what stays encoded
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
        if self._bearer_presented(headers):
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
        """The agent's headers minus framing and credentials, the key where the agent put the token: the
        `x-api-key` header for an agent that sent it there alone (Anthropic's API), else a bearer token."""
        named = _connection_named(headers)
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in headers.items():
            if name.lower() not in _NOT_FORWARDED and name.lower() not in named:
                out.add(name, value)
        if self._bearer_presented(headers):
            out["Authorization"] = f"Bearer {self._key}"
        else:
            out["x-api-key"] = self._key
        out["Accept-Encoding"] = "identity"
        return out

    def _bearer_presented(self, headers: CIMultiDictProxy[str]) -> bool:
        for value in headers.getall("Authorization", ()):
            scheme, _, credential = value.strip().partition(" ")
            if scheme.lower() == "bearer" and self._is_token(credential.strip()):
                return True
        return False

    def _answer_headers(self, headers: CIMultiDictProxy[str], decoded: bool) -> CIMultiDict[str]:
        """The door's answer headers the agent may see: no framing, no credential, no form of the key."""
        named = _connection_named(headers)
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in headers.items():
            lower = name.lower()
            if (
                lower in _HOP_BY_HOP
                or lower in _CREDENTIAL_HEADERS
                or lower in named
                or lower == "content-length"
                or (decoded and lower == "content-encoding")
                or self._scrub.found_in(f"{name}:{value}".encode("utf-8", "surrogateescape"))
            ):
                continue
            out.add(name, value)
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
            coding = _answer_coding(upstream.headers)
            if coding == "opaque":
                return web.Response(status=502, text=UNREADABLE)
            reason = upstream.reason
            if reason is not None and self._scrub.found_in(reason.encode("utf-8", "surrogateescape")):
                reason = None
            response = web.StreamResponse(status=upstream.status, reason=reason)
            response.headers.extend(self._answer_headers(upstream.headers, decoded=coding == "decoded"))
            await response.prepare(request)
            scrub = self._scrub.answer()
            reader = AnswerReader(upstream.headers.get("Content-Type", "")) if 200 <= upstream.status < 300 else None
            try:
                async for chunk in upstream.content.iter_any():
                    if reader is not None:
                        reader.feed(chunk)
                    if scrubbed := scrub.feed(chunk):
                        await response.write(scrubbed)
            except (aiohttp.ClientError, TimeoutError, OSError):
                # The door broke off mid-answer: break the agent's connection too, so a cut answer
                # never arrives looking whole.
                if request.transport is not None:
                    request.transport.abort()
                return response
            if reader is not None:
                self._usage.add(reader.finish())
            await response.write_eof(scrub.finish())
            return response
        finally:
            upstream.release()


def _answer_coding(headers: CIMultiDictProxy[str]) -> Literal["plain", "decoded", "opaque"]:
    """Whether the answer's body reaches the proxy plain, decoded by aiohttp, or still encoded.

    Mirrors aiohttp: it decodes one `Content-Encoding` value that is exactly gzip or deflate (ASCII, any
    case), and no transfer coding but chunked. Anything else would pass on bytes a scrub cannot read."""
    codings = headers.getall("Content-Encoding", ())
    transfers = headers.getall("Transfer-Encoding", ())
    if any(token.strip().lower() not in ("chunked", "identity") for value in transfers for token in value.split(",")):
        return "opaque"
    if all(value.strip().lower() in ("", "identity") for value in codings):
        return "plain"
    if len(codings) == 1 and codings[0].isascii() and codings[0].lower() in _DECODED:
        return "decoded"
    return "opaque"


def _connection_named(headers: CIMultiDictProxy[str]) -> set[str]:
    """Headers a `Connection` header names are hop-by-hop for this connection only (RFC 9110 §7.6.1)."""
    return {token.strip().lower() for value in headers.getall("Connection", ()) for token in value.split(",")}
