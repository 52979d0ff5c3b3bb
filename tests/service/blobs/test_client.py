"""The Blossom client against a hostile server (wrong bytes, huge bodies, a slow drip, 5xx, redirects away,
429s) and against the real embedded server: a typed error every time, within its bound, and never bytes that
do not digest to their name."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
import pytest_asyncio
from aiohttp import web

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import AuthScheme, BlobError, BlobServer, BlobStore, RetryPolicy, base_from_relay

BLOB = b"a suite file\n" * 100
DIGEST = hashlib.sha256(BLOB).hexdigest()
MIB = 1024 * 1024
#: Every hostile case must end well inside this (the client's own deadlines are far shorter here).
GUARD_SECONDS = 10.0
Handler = Callable[[web.Request], Awaitable[web.Response]]


@dataclass
class Hostile:
    """The hostile server's record: how often the far host was asked, what each upload attempt sent."""

    url: str = ""
    far_url: str = ""
    far_hits: int = 0
    uploads: list[dict[str, str]] = field(default_factory=list)


async def _drip(request: web.Request, declared: int, pause: float) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Length": str(declared)})
    await response.prepare(request)
    try:
        for _ in range(400):  # bounded: the client leaves long before
            await response.write(b"x")
            await asyncio.sleep(pause)
    except (ConnectionError, RuntimeError):
        pass
    return response


def hostile_app(record: Hostile) -> tuple[web.Application, Handler]:
    async def get(request: web.Request) -> web.StreamResponse:
        kind, name = request.match_info["kind"], request.match_info["name"]
        if kind == "good":
            return web.Response(body=BLOB)
        if kind == "missing":
            return web.Response(status=404)
        if kind == "wrong":
            return web.Response(body=BLOB + b"tampered")
        if kind == "error":
            return web.Response(status=500, text="boom")
        if kind == "declared":  # says 17 MiB, then trickles
            return await _drip(request, 17 * MIB, 0.01)
        if kind == "drip":  # a plausible length, one byte every 50 ms
            return await _drip(request, len(BLOB), 0.05)
        if kind == "flood":  # no length, then more than the bound
            response = web.StreamResponse()
            await response.prepare(request)
            try:
                for _ in range(40):
                    await response.write(b"f" * MIB)
            except (ConnectionError, RuntimeError):
                pass
            return response
        if kind == "gzip":  # a 64 MiB inflation bomb in 64 KiB
            body = gzip.compress(b"\0" * 64 * MIB)
            return web.Response(body=body, headers={"Content-Encoding": "gzip"})
        if kind == "fat-headers":
            return web.Response(body=BLOB, headers={"X-Padding": "p" * 20_000})
        if kind == "hop":
            raise web.HTTPFound(f"/good/{name}")
        if kind == "loop":
            raise web.HTTPFound(f"/loop/{name}")
        if kind == "away":
            raise web.HTTPFound(f"{record.far_url}/good/{name}")
        raise web.HTTPNotFound

    async def far(request: web.Request) -> web.Response:
        record.far_hits += 1
        return web.Response(body=BLOB)

    async def upload(request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        body = await request.read()
        record.uploads.append(dict(request.headers))
        if kind == "busy" or (kind == "busy-twice" and len(record.uploads) <= 2):
            return web.Response(status=429)
        if kind == "liar":
            return web.json_response({"url": "x", "sha256": "0" * 64, "size": len(body), "type": "a/b"}, status=201)
        if kind == "garbled":
            return web.Response(status=201, text="<html>")
        if kind == "down":
            return web.Response(status=503)
        if kind == "strict":
            return web.json_response({"message": "no \x1b[31mway"}, status=401)
        digest = hashlib.sha256(body).hexdigest()
        descriptor = {"url": f"x/{digest}", "sha256": digest, "size": len(body), "type": "text/plain"}
        return web.json_response(descriptor, status=201)

    async def absent(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_put("/{kind}/upload", upload)
    app.router.add_route("HEAD", "/{kind}/{name}", absent)
    app.router.add_get("/{kind}/{name}", get, allow_head=False)
    return app, far


async def _listen(app: web.Application, host: str) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    return runner, f"http://{host}:{runner.addresses[0][1]}"


@pytest_asyncio.fixture
async def hostile() -> AsyncIterator[Hostile]:
    """The hostile server on 127.0.0.1, and "another host" on 127.0.0.2 that counts what reaches it."""
    record = Hostile()
    app, far = hostile_app(record)
    far_app = web.Application()
    far_app.router.add_get("/good/{name}", far)
    runner, record.url = await _listen(app, "127.0.0.1")
    far_runner, record.far_url = await _listen(far_app, "127.0.0.2")
    yield record
    await far_runner.cleanup()
    await runner.cleanup()


class FakeTime:
    """A clock that moves only when the client sleeps (the 429 backoff), recording each sleep."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def failed(store: BlobStore, digest: str = DIGEST) -> BlobError:
    async with asyncio.timeout(GUARD_SECONDS):
        with pytest.raises(BlobError) as caught:
            await store.fetch(digest)
    return caught.value


def reader(hostile: Hostile, *kinds: str, attempt_seconds: float = 60.0, fetch_seconds: float = 120.0) -> BlobStore:
    bases = [f"{hostile.url}/{kind}" for kind in kinds]
    return BlobStore(bases, attempt_seconds=attempt_seconds, fetch_seconds=fetch_seconds)


async def test_a_good_base_returns_the_bytes_and_a_same_host_redirect_is_followed(hostile: Hostile) -> None:
    async with reader(hostile, "good") as store:
        assert await store.fetch(f"sha256:{DIGEST}") == BLOB
    async with reader(hostile, "hop") as store:
        assert await store.fetch(DIGEST) == BLOB


@pytest.mark.parametrize(
    ("kinds", "code", "words"),
    [
        (("missing",), "content_unavailable", "not found"),
        (("missing", "missing"), "content_unavailable", "not found"),
        (("wrong",), "identity_mismatch", "do not digest to their name"),
        (("missing", "wrong"), "identity_mismatch", "do not digest to their name"),
        (("error",), "unavailable", "HTTP 500"),
        (("declared",), "too_large", "offers 17825792 bytes"),
        (("flood",), "too_large", "sent more than 16777216 bytes"),
        (("gzip",), "identity_mismatch", "do not digest to their name"),
        (("fat-headers",), "unavailable", "could not be read"),
        (("loop",), "unavailable", "redirected more than 3 times"),
    ],
)
async def test_each_hostile_answer_is_a_typed_error(
    hostile: Hostile, kinds: tuple[str, ...], code: str, words: str
) -> None:
    async with reader(hostile, *kinds) as store:
        error = await failed(store)
    assert error.code == code
    assert words in error.message
    assert f"sha256:{DIGEST}" in error.message
    assert all(f"{hostile.url}/{kind}" in error.message for kind in kinds)


async def test_a_redirect_to_another_host_is_not_followed(hostile: Hostile) -> None:
    async with reader(hostile, "away") as store:
        error = await failed(store)
    assert (error.code, hostile.far_hits) == ("unavailable", 0)
    assert "redirected to another host" in error.message


async def test_a_slow_drip_ends_at_the_deadline(hostile: Hostile) -> None:
    async with reader(hostile, "drip", attempt_seconds=0.3) as store:
        error = await failed(store)
    assert error.code == "unavailable"
    assert "did not answer in time" in error.message


async def test_the_fetch_deadline_covers_every_base(hostile: Hostile) -> None:
    async with reader(hostile, "drip", "drip", "good", attempt_seconds=5.0, fetch_seconds=0.3) as store:
        error = await failed(store)
    assert error.code == "unavailable"
    assert "not tried: the fetch ran out of time" in error.message


async def test_a_later_base_serves_what_an_earlier_one_lacks_or_garbles(hostile: Hostile) -> None:
    for first in ("missing", "wrong", "error", "away"):
        async with reader(hostile, first, "good") as store:
            assert await store.fetch(DIGEST) == BLOB
    async with reader(hostile, "good") as store:
        assert await store.has(DIGEST) is False  # the hostile server answers HEAD 404


async def test_a_malformed_digest_is_refused_before_any_request(hostile: Hostile) -> None:
    async with reader(hostile, "good") as store:
        for digest in ("sha256:XYZ", DIGEST.upper(), "md5:" + DIGEST, ""):
            with pytest.raises(BlobError) as caught:
                await store.fetch(digest)
            assert caught.value.code == "invalid_argument"


def writer(
    hostile: Hostile,
    kind: str,
    secret: SecretKey,
    time: FakeTime,
    auth: AuthScheme = AuthScheme.NIP98,
    max_bytes: int = 16 * MIB,
) -> BlobStore:
    return BlobStore(
        [],
        f"{hostile.url}/{kind}",
        secret,
        auth=auth,
        max_bytes=max_bytes,
        retry=RetryPolicy(first=0.5, cap=2.0, patience=6.0),
        clock=time.clock,
        sleep=time.sleep,
    )


def authorization_of(headers: dict[str, str]) -> dict[str, object]:
    value = json.loads(base64.b64decode(headers["Authorization"].removeprefix("Nostr "), validate=True))
    assert isinstance(value, dict)
    return value


async def test_429_then_201_waits_doubling_with_a_fresh_nip98_authorization_each_time(
    hostile: Hostile, uploader: SecretKey
) -> None:
    time = FakeTime()
    async with writer(hostile, "busy-twice", uploader, time) as store:
        done = await store.upload(BLOB, "Text/Plain")
    assert (done.sha256, done.size, done.outcome) == (DIGEST, len(BLOB), "created")
    assert time.sleeps == [0.5, 1.0]
    events = [authorization_of(headers) for headers in hostile.uploads]
    assert len({event["id"] for event in events}) == 3
    base = f"{hostile.url}/busy-twice"
    for event, headers in zip(events, hostile.uploads, strict=True):
        assert (event["kind"], event["content"]) == (27_235, "")
        assert event["tags"] == [["u", f"{base}/upload"], ["method", "PUT"], ["payload", DIGEST]]
        assert (headers["X-SHA-256"], headers["Content-Type"]) == (DIGEST, "text/plain")


async def test_429_past_the_patience_is_rate_limited(hostile: Hostile, uploader: SecretKey) -> None:
    time = FakeTime()
    async with writer(hostile, "busy", uploader, time) as store:
        with pytest.raises(BlobError) as caught:
            await store.upload(BLOB)
    assert caught.value.code == "rate_limited"
    assert time.sleeps == [0.5, 1.0, 2.0, 2.0]  # 5.5 s waited; one more would pass the 6 s patience
    assert len(hostile.uploads) == 5


@pytest.mark.parametrize(
    ("kind", "code", "words"),
    [
        ("liar", "identity_mismatch", "a descriptor for other bytes"),
        ("garbled", "unavailable", "not JSON"),
        ("down", "unavailable", "HTTP 503"),
        ("strict", "refused", "refused the authorization (HTTP 401): 'no \\x1b[31mway'"),
    ],
)
async def test_each_bad_upload_answer_is_a_typed_error(
    hostile: Hostile, uploader: SecretKey, kind: str, code: str, words: str
) -> None:
    async with writer(hostile, kind, uploader, FakeTime()) as store:
        with pytest.raises(BlobError) as caught:
            await store.upload(BLOB)
    assert caught.value.code == code
    assert words in caught.value.message
    assert f"sha256:{DIGEST}" in caught.value.message
    assert uploader.to_hex() not in caught.value.message


async def test_a_bud02_store_signs_24242(hostile: Hostile, uploader: SecretKey) -> None:
    async with writer(hostile, "ok", uploader, FakeTime(), auth=AuthScheme.BUD02) as store:
        assert (await store.upload(BLOB)).outcome == "created"
    event = authorization_of(hostile.uploads[0])
    assert event["kind"] == 24_242
    tags = event["tags"]
    assert isinstance(tags, list)
    assert tags[:2] == [["t", "upload"], ["x", DIGEST]]
    assert tags[2][0] == "expiration"
    assert int(tags[2][1]) == 1_800_000_000 + 300


async def test_an_oversized_upload_is_refused_before_any_request(hostile: Hostile, uploader: SecretKey) -> None:
    async with writer(hostile, "ok", uploader, FakeTime(), max_bytes=10) as store:
        with pytest.raises(BlobError) as caught:
            await store.upload(BLOB)
    assert caught.value.code == "too_large"
    assert hostile.uploads == []


async def test_the_round_trip_through_the_embedded_server(
    blob_server: BlobServer, uploader: SecretKey, stranger: SecretKey
) -> None:
    for scheme, blob in ((AuthScheme.NIP98, BLOB), (AuthScheme.BUD02, BLOB + b"24242")):
        async with BlobStore([blob_server.url], blob_server.url, uploader, auth=scheme) as store:
            done = await store.upload(blob, "text/plain")
            digest = hashlib.sha256(blob).hexdigest()
            assert (done.outcome, done.url, done.sha256, done.size) == (
                "created",
                f"{blob_server.url}/{digest}",
                digest,
                len(blob),
            )
            assert (await store.upload(blob, "text/plain")).outcome == "present"
            assert await store.fetch(digest) == blob
            assert await store.has(digest) is True
    async with BlobStore([blob_server.url], blob_server.url, stranger) as store:
        with pytest.raises(BlobError) as caught:
            await store.upload(b"not allowed")
    assert caught.value.code == "refused"
    assert "does not let this key upload (HTTP 403)" in caught.value.message


def test_the_relay_url_names_its_blossom_base() -> None:
    assert base_from_relay("wss://relay.openagents.com") == "https://relay.openagents.com"
    assert base_from_relay("ws://127.0.0.1:7777/path?x=1") == "http://127.0.0.1:7777"
    with pytest.raises(BlobError):
        base_from_relay("relay.example.com")


def test_bad_bases_are_refused_at_construction(uploader: SecretKey) -> None:
    for base in ("ftp://host", "https://", "https://host/?q=1", "host"):
        with pytest.raises(BlobError) as caught:
            BlobStore([base])
        assert caught.value.code == "invalid_argument"
    with pytest.raises(BlobError):
        BlobStore([], "https://host")  # a write base with no key to sign with
    assert uploader.to_hex() not in repr(BlobStore([], "https://host", uploader))


async def test_a_base_nobody_listens_on_is_unavailable() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    async with BlobStore([f"http://127.0.0.1:{port}"]) as store:
        error = await failed(store)
    assert error.code == "unavailable"
    assert f"http://127.0.0.1:{port}: could not be reached" in error.message
