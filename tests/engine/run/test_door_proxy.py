"""The per-run door proxy against a real loopback upstream, reached over its real Unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from eval_runner.engine.run.door_proxy import TOKEN_REQUIRED, DoorProxy, DoorProxyError

REAL_KEY = "sk-real-door-key-0123456789"


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: dict[str, list[str]]
    body: bytes


@dataclass
class Upstream:
    url: str
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Unix socket paths are capped at 107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="door-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream(url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        state.seen.append(Seen(request.method, request.raw_path, headers, await request.read()))
        state.arrived.set()
        if request.path.startswith("/status/"):
            return web.Response(status=int(request.path.rsplit("/", 1)[1]), text="refused")
        if request.path == "/stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b"event: delta\ndata: one\n\n")
            await state.release.wait()
            await response.write(b"event: done\ndata: two\n\n")
            await response.write_eof()
            return response
        if request.path == "/cut":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b"data: partial\n\n")
            assert request.transport is not None
            request.transport.abort()
            return response
        return web.json_response(
            {"path": request.path_qs, "length": len(state.seen[-1].body)},
            headers={"X-Upstream": "yes", "Connection": "keep-alive"},
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    yield state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
async def proxy(upstream: Upstream, short_dir: Path) -> AsyncIterator[DoorProxy]:
    async with DoorProxy(upstream.url, REAL_KEY, short_dir / "door.sock") as door:
        yield door


def client(door: DoorProxy) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(door.socket_path)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_forwards_path_query_and_body_with_the_real_key_in_place_of_the_token(
    proxy: DoorProxy, upstream: Upstream
) -> None:
    async with (
        client(proxy) as session,
        session.post(
            URL("http://door/v1/responses?stream=false&x=%2F", encoded=True),
            data=b'{"input":"hi"}',
            headers={**bearer(proxy.token), "Content-Type": "application/json", "X-Agent": "stand-in"},
        ) as answer,
    ):
        body = await answer.read()
        answer_headers = "\n".join(f"{k}: {v}" for k, v in answer.headers.items())
    assert answer.status == 200
    assert answer.headers["X-Upstream"] == "yes"
    [seen] = upstream.seen
    assert (seen.method, seen.path_qs, seen.body) == ("POST", "/v1/responses?stream=false&x=%2F", b'{"input":"hi"}')
    assert seen.headers["authorization"] == [f"Bearer {REAL_KEY}"]
    assert seen.headers["content-type"] == ["application/json"]
    assert seen.headers["x-agent"] == ["stand-in"]
    assert proxy.token not in repr(seen.headers)
    assert REAL_KEY not in answer_headers
    assert REAL_KEY.encode() not in body
    assert proxy.forwarded == 1
    assert not proxy.auth_failed


async def test_x_api_key_and_a_bearer_scheme_in_any_case_are_accepted(proxy: DoorProxy, upstream: Upstream) -> None:
    async with client(proxy) as session:
        for headers in ({"x-api-key": proxy.token}, {"Authorization": f"bEaReR {proxy.token}"}):
            async with session.get("http://door/v1/models", headers=headers) as answer:
                assert answer.status == 200
    # The key goes where the agent put the token: x-api-key (Anthropic's API) or a bearer token.
    assert [seen.headers.get("x-api-key") for seen in upstream.seen] == [[REAL_KEY], None]
    assert [seen.headers.get("authorization") for seen in upstream.seen] == [None, [f"Bearer {REAL_KEY}"]]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": "Basic {token}"},
        {"Authorization": "Bearer {token}x"},
        {"x-api-key": "{token} extra"},
    ],
)
async def test_a_missing_or_wrong_token_is_401_and_nothing_is_forwarded(
    proxy: DoorProxy, upstream: Upstream, headers: dict[str, str]
) -> None:
    sent = {name: value.format(token=proxy.token) for name, value in headers.items()}
    async with client(proxy) as session, session.post("http://door/v1/responses", data=b"{}", headers=sent) as answer:
        assert answer.status == 401
        assert await answer.text() == TOKEN_REQUIRED
    assert upstream.seen == []
    assert proxy.forwarded == 0


async def test_a_body_over_the_cap_is_413_by_declared_length_or_as_it_streams(
    upstream: Upstream, short_dir: Path
) -> None:
    async with DoorProxy(upstream.url, REAL_KEY, short_dir / "d.sock", body_limit=1024) as door:

        async def chunked() -> AsyncIterator[bytes]:
            for _ in range(3):
                yield b"x" * 400

        async with client(door) as session:
            async with session.post("http://door/a", data=b"x" * 1024, headers=bearer(door.token)) as answer:
                assert answer.status == 200
            async with session.post("http://door/b", data=b"x" * 1025, headers=bearer(door.token)) as answer:
                assert answer.status == 413
            async with session.post("http://door/c", data=chunked(), headers=bearer(door.token)) as answer:
                assert answer.status == 413
    assert [seen.path_qs for seen in upstream.seen] == ["/a"]


async def test_an_unreachable_door_is_502(short_dir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with (
        DoorProxy(f"http://127.0.0.1:{port}", REAL_KEY, short_dir / "d.sock") as door,
        client(door) as session,
        session.post("http://door/v1/responses", data=b"{}", headers=bearer(door.token)) as answer,
    ):
        assert answer.status == 502
        assert REAL_KEY not in await answer.text()


@pytest.mark.parametrize("status", [401, 403])
async def test_a_door_that_refuses_the_key_is_remembered(proxy: DoorProxy, status: int) -> None:
    async with client(proxy) as session:
        async with session.get("http://door/ok", headers=bearer(proxy.token)) as answer:
            assert answer.status == 200
        assert not proxy.auth_failed
        async with session.get(f"http://door/status/{status}", headers=bearer(proxy.token)) as answer:
            assert answer.status == status
        async with session.get("http://door/ok", headers=bearer(proxy.token)) as answer:
            assert answer.status == 200
    assert proxy.auth_failed


async def test_server_sent_events_pass_through_as_they_arrive(proxy: DoorProxy, upstream: Upstream) -> None:
    async with client(proxy) as session, session.get("http://door/stream", headers=bearer(proxy.token)) as answer:
        assert answer.headers["Content-Type"] == "text/event-stream"
        # The upstream holds its second event until the first has reached the agent.
        first = await asyncio.wait_for(answer.content.readuntil(b"\n\n"), timeout=10)
        assert first == b"event: delta\ndata: one\n\n"
        upstream.release.set()
        assert await answer.content.read() == b"event: done\ndata: two\n\n"


async def test_an_answer_the_door_cuts_off_reaches_the_agent_cut_off(proxy: DoorProxy) -> None:
    async with client(proxy) as session, session.get("http://door/cut", headers=bearer(proxy.token)) as answer:
        with pytest.raises(aiohttp.ClientPayloadError):
            await answer.read()


async def test_hop_by_hop_headers_and_those_connection_names_are_dropped(proxy: DoorProxy, upstream: Upstream) -> None:
    headers = {
        **bearer(proxy.token),
        "Connection": "keep-alive, X-Private",
        "X-Private": "1",
        "Proxy-Authorization": "Basic abc",
        "TE": "trailers",
        "X-Kept": "2",
    }
    async with client(proxy) as session, session.get("http://door/x", headers=headers) as answer:
        assert answer.status == 200
    [seen] = upstream.seen
    assert seen.headers["x-kept"] == ["2"]
    for name in ("x-private", "proxy-authorization", "te"):
        assert name not in seen.headers


async def test_the_socket_is_0666_and_the_proxy_shows_no_secret(proxy: DoorProxy) -> None:
    assert stat.S_IMODE(os.stat(proxy.socket_path).st_mode) == 0o666
    assert len(proxy.token) == 64
    assert int(proxy.token, 16) >= 0
    shown = repr(proxy) + str(proxy)
    assert proxy.token not in shown
    assert REAL_KEY not in shown


async def test_each_proxy_has_a_fresh_token_and_close_removes_the_socket(upstream: Upstream, short_dir: Path) -> None:
    one = DoorProxy(upstream.url, REAL_KEY, short_dir / "1.sock")
    two = DoorProxy(upstream.url, REAL_KEY, short_dir / "2.sock")
    assert one.token != two.token
    await one.start()
    assert one.socket_path.exists()
    await one.close()
    assert not one.socket_path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as uid 65534")
async def test_an_unprivileged_uid_can_reach_the_socket(upstream: Upstream, short_dir: Path) -> None:
    short_dir.chmod(0o711)
    async with DoorProxy(upstream.url, REAL_KEY, short_dir / "door.sock") as door:
        script = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "s.sendall(b'GET /nobody HTTP/1.1\\r\\nHost: d\\r\\nAuthorization: Bearer '+sys.argv[2].encode()"
            "+b'\\r\\nConnection: close\\r\\n\\r\\n')\n"
            "print(s.recv(64).split(b' ')[1].decode())\n"
        )
        child = await asyncio.create_subprocess_exec(
            "/usr/bin/python3",
            "-c",
            script,
            str(door.socket_path),
            door.token,
            user=65534,
            group=65534,
            stdout=subprocess.PIPE,
        )
        out, _ = await child.communicate()
    assert out.decode().strip() == "200"
    assert [seen.path_qs for seen in upstream.seen] == ["/nobody"]


def test_bad_settings_are_refused(short_dir: Path) -> None:
    (short_dir / "taken").write_text("")
    with pytest.raises(DoorProxyError):
        DoorProxy("ftp://door", REAL_KEY, short_dir / "d.sock")
    with pytest.raises(DoorProxyError):
        DoorProxy("https://user:pw@door", REAL_KEY, short_dir / "d.sock")
    with pytest.raises(DoorProxyError):
        DoorProxy("https://door", "", short_dir / "d.sock")
    with pytest.raises(DoorProxyError, match="longer"):
        DoorProxy("https://door", REAL_KEY, short_dir / ("x" * 120))
    with pytest.raises(DoorProxyError, match="already exists"):
        asyncio.run(DoorProxy("https://door", REAL_KEY, short_dir / "taken").start())


async def test_close_does_not_wait_for_an_answer_still_in_flight(upstream: Upstream, short_dir: Path) -> None:
    door = DoorProxy(upstream.url, REAL_KEY, short_dir / "d.sock")
    await door.start()
    async with client(door) as session:
        pending = asyncio.ensure_future(session.get("http://door/stream", headers=bearer(door.token)))
        await asyncio.wait_for(upstream.arrived.wait(), timeout=10)
        # The upstream holds its answer open; the run is over and the proxy must close anyway.
        await asyncio.wait_for(door.close(), timeout=10)
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            answer = await pending
            await answer.read()
