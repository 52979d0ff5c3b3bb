"""The door proxy never lets the real key reach the agent, however a hostile door echoes it back.

A stand-in door on loopback echoes the request (its `Authorization: Bearer <key>` included) in every
form an answer can take: JSON, escaped JSON, percent-encoding, answer headers and reason phrase,
base64 at every alignment, a key split across streamed chunks, server-sent events, gzip and deflate,
and codings the proxy cannot read. The agent is an aiohttp client on the proxy's real Unix socket;
what it receives (reason, raw header bytes, body bytes as sent) is searched for the key independently
of `door.key_forms`: its bytes, its escaped forms, and every base64 decoding of every run in it.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import re
import shutil
import tempfile
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from eval_runner.engine.run.collect import REDACTED
from eval_runner.engine.run.door_proxy import UNREACHABLE, UNREADABLE, DoorProxy, KeyScrub, key_forms

# Has `/`, `+`-making and `/`-making bytes (`~~~`, `?>`), so its JSON-escaped, percent-encoded and
# URL-safe base64 forms all differ from the plain ones; 35 bytes, so its base64 is padded.
KEY = "sk-door/key~~~0123456789?>abcdefXYZ"
KEY_BYTES = KEY.encode()
# Base64 of the key as a door might echo it: alone, or inside a longer run at each alignment mod 3.
EMBEDDINGS = (b"", b"Bearer ", b"x:", b"user:", b"Authorization: Bearer ")
SPLIT_AT = 12


@dataclass
class Door:
    url: str
    accept_encodings: list[str | None] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def gives_away(received: bytes) -> list[str]:
    """How `received` shows the key: verbatim, escaped, or in any base64 decoding of any run in it."""
    shown = [
        name
        for name, form in (
            ("bytes", KEY_BYTES),
            ("json-escaped", KEY.replace("/", "\\/").encode()),
            ("percent-encoded", urllib.parse.quote(KEY, safe="").encode()),
        )
        if form in received
    ]
    for run in re.findall(rb"[A-Za-z0-9+/_-]{4,}", received):
        standard = run.translate(bytes.maketrans(b"-_", b"+/"))
        for offset in range(4):
            usable = standard[offset:]
            decoded = base64.b64decode(usable[: len(usable) // 4 * 4])
            if KEY_BYTES in decoded:
                shown.append(f"base64 {run[:12]!r}… at offset {offset}")
    return shown


def every_base64() -> list[bytes]:
    encoded = []
    for lead in EMBEDDINGS:
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded += [encode(lead + KEY_BYTES), encode(lead + KEY_BYTES).rstrip(b"=")]
    return encoded


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="door-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def door() -> AsyncIterator[Door]:
    """A stand-in door that hands back the credential it was sent, in as many ways as it can."""
    state = Door(url="")

    async def handle(request: web.Request) -> web.StreamResponse:
        state.accept_encodings.append(request.headers.get("Accept-Encoding"))
        credential = request.headers["Authorization"]
        if request.path == "/echo":
            echo = {"headers": dict(request.headers), "body": (await request.read()).decode()}
            text = json.dumps(echo)
            query = urllib.parse.urlencode({"authorization": credential, "agent": request.headers["X-Agent"]})
            escaped = text.replace("/", "\\/")  # as PHP's json_encode writes it
            return web.Response(text=f"{text}\n{escaped}\n{query}\n")
        if request.path == "/headers":
            headers: CIMultiDict[str] = CIMultiDict()
            for name, value in (
                ("Authorization", credential),
                ("X-Api-Key", KEY),
                ("Api-Key", "door-chosen-value"),
                ("Set-Cookie", f"session={KEY}; HttpOnly"),
                ("Set-Cookie", "theme=dark"),
                ("X-Echo", credential),
                ("X-Echo-Base64", base64.b64encode(credential.encode()).decode()),
                ("WWW-Authenticate", 'Bearer realm="door"'),
                ("X-Kept", "kept"),
            ):
                headers.add(name, value)
            return web.Response(text="the answer", reason=f"Fine {KEY}", headers=headers)
        if request.path == "/base64":
            lines = [encoded.decode() for encoded in every_base64()]
            whole_request = base64.b64encode(json.dumps(dict(request.headers)).encode()).decode()
            return web.Response(text="\n".join(["first", *lines, whole_request, "last"]))
        if request.path == "/split":
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            await response.write(b"before " + KEY_BYTES[:SPLIT_AT])
            await state.release.wait()
            await response.write(KEY_BYTES[SPLIT_AT:] + b" after")
            await response.write_eof()
            return response
        if request.path == "/sse":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(f'data: {{"delta":"your key is {KEY}"}}\n\n'.encode())
            await state.release.wait()
            await response.write(f'data: {{"delta":"{base64.b64encode(KEY_BYTES).decode()}"}}\n\n'.encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        if request.path in ("/gzip", "/deflate"):
            # A hostile door ignores the `Accept-Encoding: identity` it was sent.
            plain = f"compressed: {credential} :end".encode()
            packed = gzip.compress(plain) if request.path == "/gzip" else zlib.compress(plain)
            return web.Response(body=packed, headers={"Content-Encoding": request.path[1:]})
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    yield state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
async def proxy(door: Door, short_dir: Path) -> AsyncIterator[DoorProxy]:
    async with DoorProxy(door.url, KEY, short_dir / "door.sock") as running:
        yield running


def agent(proxy: DoorProxy) -> aiohttp.ClientSession:
    """The agent's side of the socket; nothing decoded, so the bytes read are the bytes sent."""
    return aiohttp.ClientSession(
        connector=aiohttp.UnixConnector(path=str(proxy.socket_path)),
        auto_decompress=False,
        headers={"Authorization": f"Bearer {proxy.token}"},
    )


def everything(answer: aiohttp.ClientResponse, body: bytes) -> bytes:
    headers = b"\n".join(name + b": " + value for name, value in answer.raw_headers)
    return (answer.reason or "").encode() + b"\n" + headers + b"\n\n" + body


async def test_an_echo_of_the_request_comes_back_without_the_key(proxy: DoorProxy) -> None:
    async with (
        agent(proxy) as session,
        session.post("http://door/echo", data=b'{"input":"hi"}', headers={"X-Agent": "stand-in/1"}) as answer,
    ):
        body = await answer.read()
        received = everything(answer, body)
    assert answer.status == 200
    assert gives_away(received) == []
    plain, escaped, query, _ = body.split(b"\n")
    echo = json.loads(plain)
    assert echo["headers"]["Authorization"] == "Bearer [redacted]"
    assert echo["headers"]["X-Agent"] == "stand-in/1"
    assert echo["body"] == '{"input":"hi"}'
    assert escaped == plain.replace(b"/", b"\\/")
    assert urllib.parse.parse_qs(query.decode()) == {
        "authorization": ["Bearer [redacted]"],
        "agent": ["stand-in/1"],
    }


async def test_credential_headers_and_any_header_holding_the_key_are_dropped(proxy: DoorProxy) -> None:
    async with agent(proxy) as session, session.get("http://door/headers") as answer:
        body = await answer.read()
        received = everything(answer, body)
    assert gives_away(received) == []
    assert body == b"the answer"
    assert answer.reason == "OK"
    for name in ("Authorization", "X-Api-Key", "Api-Key", "Set-Cookie", "X-Echo", "X-Echo-Base64"):
        assert name not in answer.headers
    assert answer.headers["X-Kept"] == "kept"
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="door"'
    assert "Content-Length" not in answer.headers


async def test_base64_of_the_key_at_every_alignment_is_scrubbed(proxy: DoorProxy) -> None:
    async with agent(proxy) as session, session.get("http://door/base64") as answer:
        body = await answer.read()
    assert gives_away(body) == []
    for encoded in every_base64():
        assert encoded not in body
    lines = body.split(b"\n")
    assert (lines[0], lines[-1]) == (b"first", b"last")
    assert len(lines) == len(every_base64()) + 3
    assert all(REDACTED in line for line in lines[1:-1])


async def test_a_key_split_across_streamed_chunks_is_caught_and_the_text_before_it_not_held(
    proxy: DoorProxy, door: Door
) -> None:
    async with agent(proxy) as session, session.get("http://door/split") as answer:
        # The door holds the key's second part until the text before the key has reached the agent.
        assert await asyncio.wait_for(answer.content.readexactly(len(b"before ")), timeout=10) == b"before "
        door.release.set()
        rest = await answer.content.read()
    assert rest == REDACTED + b" after"


async def test_server_sent_events_that_carry_the_key_arrive_scrubbed_and_at_once(proxy: DoorProxy, door: Door) -> None:
    async with agent(proxy) as session, session.get("http://door/sse") as answer:
        assert answer.headers["Content-Type"] == "text/event-stream"
        first = await asyncio.wait_for(answer.content.readuntil(b"\n\n"), timeout=10)
        assert first == b'data: {"delta":"your key is [redacted]"}\n\n'
        door.release.set()
        rest = await answer.content.read()
    assert rest == b'data: {"delta":"[redacted]"}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_answer_is_decoded_then_scrubbed(proxy: DoorProxy, door: Door, coding: str) -> None:
    async with (
        agent(proxy) as session,
        session.get(f"http://door/{coding}", headers={"Accept-Encoding": "gzip, br"}) as answer,
    ):
        body = await answer.read()
        received = everything(answer, body)
    assert door.accept_encodings == ["identity"]
    assert "Content-Encoding" not in answer.headers
    assert body == b"compressed: Bearer [redacted] :end"
    assert gives_away(received) == []


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Encoding: br\r\nContent-Length: {size}\r\n",
        b"Content-Encoding: x-gzip\r\nContent-Length: {size}\r\n",
        b"Content-Encoding: gzip, gzip\r\nContent-Length: {size}\r\n",
        b"Content-Encoding: identity\r\nContent-Encoding: gzip\r\nContent-Length: {size}\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
    ],
)
async def test_an_answer_in_a_coding_the_proxy_cannot_read_is_refused_whole(short_dir: Path, head: bytes) -> None:
    hidden = gzip.compress(KEY_BYTES)

    async def answer_hidden(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        chunked = b"Transfer-Encoding" in head
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(hidden), hidden) if chunked else hidden
        writer.write(b"HTTP/1.1 200 OK\r\n" + head.replace(b"{size}", b"%d" % len(hidden)) + b"\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_hidden, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with (
        server,
        DoorProxy(f"http://127.0.0.1:{port}", KEY, short_dir / "d.sock") as proxy,
        agent(proxy) as session,
        session.get("http://door/x") as answer,
    ):
        body = await answer.read()
        received = everything(answer, body)
    assert answer.status == 502
    # Without Brotli installed, aiohttp itself refuses a br answer before the proxy sees a header.
    assert body.decode() in ({UNREADABLE, UNREACHABLE} if b": br" in head else {UNREADABLE})
    assert hidden[10:] not in received  # the gzip stream past its fixed header
    assert gives_away(received) == []


# ------------------------------------------------------------------------------------------------------
# The streaming scrub on its own.


def scrubbed_by_hand(data: bytes, forms: list[bytes]) -> bytes:
    """Leftmost-longest replacement, one position at a time: the meaning `KeyScrub` must have."""
    out, at = bytearray(), 0
    while at < len(data):
        hit = max((form for form in forms if data.startswith(form, at)), key=len, default=b"")
        if hit:
            out += REDACTED
            at += len(hit)
        else:
            out.append(data[at])
            at += 1
    return bytes(out)


small_bytes = st.text(alphabet="ab[]", max_size=6).map(str.encode)


def prefixes_of(forms: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.sampled_from(forms).flatmap(lambda form: st.integers(1, len(form)).map(lambda size: form[:size]))


@given(st.data())
def test_any_chunking_scrubs_as_the_whole_answer_does(data: st.DataObject) -> None:
    # Forms that are prefixes of others (as unpadded base64 is of padded) are the hard case.
    forms = data.draw(st.lists(small_bytes.filter(bool), min_size=1, max_size=3), label="forms")
    forms += data.draw(st.lists(prefixes_of(forms), max_size=2), label="prefix forms")
    piece = st.one_of(st.sampled_from(forms), prefixes_of(forms), small_bytes)
    pieces = data.draw(st.lists(piece, max_size=12), label="pieces")
    answer = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(answer)), max_size=6), label="cuts"))
    scrub = KeyScrub(forms)
    stream = scrub.answer()
    sent = b""
    for start, end in zip([0, *cuts], [*cuts, len(answer)], strict=True):
        sent += stream.feed(answer[start:end])
        assert stream.withheld < max(map(len, forms))
    sent += stream.finish()
    assert sent == scrub.whole(answer) == scrubbed_by_hand(answer, forms)


@given(
    key=st.text(min_size=8, max_size=40),
    before=st.binary(max_size=10),
    after=st.binary(max_size=10),
    urlsafe=st.booleans(),
)
def test_the_key_never_decodes_from_a_scrubbed_base64_run(key: str, before: bytes, after: bytes, urlsafe: bool) -> None:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    raw = key.encode()
    scrubbed = KeyScrub(key_forms(key)).whole(encode(before + raw + after))
    assert REDACTED in scrubbed
    for run in re.findall(rb"[A-Za-z0-9+/_-]+", scrubbed):
        standard = run.translate(bytes.maketrans(b"-_", b"+/"))
        for offset in range(4):
            usable = standard[offset:]
            assert raw not in base64.b64decode(usable[: len(usable) // 4 * 4])


def test_a_tail_that_cannot_become_the_key_is_not_held() -> None:
    stream = KeyScrub(key_forms(KEY)).answer()
    assert stream.feed(b"data: one\n\n") == b"data: one\n\n"
    assert stream.withheld == 0
    assert stream.feed(b"data: " + KEY_BYTES[:5]) == b"data: "
    assert stream.withheld == 5
    assert stream.feed(b"!") == KEY_BYTES[:5] + b"!"
    assert stream.finish() == b""


def test_a_held_tail_that_is_a_whole_form_is_scrubbed_when_the_answer_ends() -> None:
    unpadded = base64.b64encode(KEY_BYTES).rstrip(b"=")
    stream = KeyScrub(key_forms(KEY)).answer()
    # Unpadded base64 of the key could still grow into the padded form, so it is held, not yet sent.
    assert stream.feed(b"tail " + unpadded) == b"tail "
    assert stream.finish() == REDACTED
