"""Junk at the embedded Blossom server (hypothesis): whatever the path, headers or authorization, the answer is
a 4xx with a JSON message, never a 500, and nothing is stored.

The server runs on its own event loop in a thread for the whole module, and the requests go out through the
standard library's `http.client`, which sends header values aiohttp's client would refuse to."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer

KEY = SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000005")
PATH_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="#?")
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=200)
NAMES = st.sampled_from(["Authorization", "Content-Type", "Content-Length", "X-SHA-256", "X-Content-Length", "Range"])


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlobServer, Path]]:
    root = tmp_path_factory.mktemp("junk") / "blobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = BlobServer(root, [KEY.public_key().to_hex()])
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server, root
    asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.run_until_complete(_wind_down())
    loop.close()


async def _wind_down() -> None:
    """Cancel and await the connection handlers aiohttp had not yet ended when the loop stopped."""
    left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def send(server: BlobServer, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value.encode("latin-1"))
        if body and "Content-Length" not in headers:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def refused(status: int, body: bytes, method: str) -> None:
    assert 400 <= status < 500, status
    if method != "HEAD" and status != 400:  # aiohttp's own 400 for a broken request is plain text
        assert isinstance(json.loads(body)["message"], str)


def stored(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() or path.is_symlink()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "HEAD", "PUT", "DELETE", "POST"]), path=st.text(PATH_CHARS, max_size=90))
@example(method="GET", path="ab" * 32)
@example(method="HEAD", path="ab" * 32 + ".pdf")
@example(method="PUT", path="ab" * 32)
@example(method="GET", path="../" * 8 + "etc/passwd")
@example(method="GET", path="%2e%2e/%2e%2e/etc/passwd")
def test_any_path_is_a_4xx(running: tuple[BlobServer, Path], method: str, path: str) -> None:
    server, root = running
    status, body = send(server, method, "/" + path, {})
    if (method, path) == ("HEAD", "upload"):  # BUD-06: "would you take an upload?", asked without a size
        assert status == 200
    else:
        refused(status, body, method)
    assert stored(root) == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(headers=st.dictionaries(NAMES, HEADER_TEXT, max_size=5), body=st.binary(max_size=64))
@example(headers={"Authorization": "Nostr " + "A" * 5000, "Content-Length": "9" * 40}, body=b"")
def test_any_headers_on_an_upload_are_a_4xx(
    running: tuple[BlobServer, Path], headers: dict[str, str], body: bytes
) -> None:
    server, root = running
    status, answer = send(server, "PUT", "/upload", headers, body)
    refused(status, answer, "PUT")
    assert stored(root) == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=st.binary(max_size=300), scheme=st.sampled_from(["Nostr", "nostr", "Bearer", ""]))
def test_any_authorization_token_is_a_401(running: tuple[BlobServer, Path], token: bytes, scheme: str) -> None:
    server, root = running
    header = f"{scheme} {base64.b64encode(token).decode()}".strip()
    status, answer = send(server, "PUT", "/upload", {"Authorization": header, "Content-Type": "a/b"}, b"blob")
    assert status == 401
    assert json.loads(answer)["message"].startswith(("the authorization does not hold", "an upload needs"))
    assert stored(root) == []


@example(declared="9" * 5000)
@example(declared="16777217")
@example(declared="0" * 30 + "1")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(declared=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30))
def test_the_upload_requirements_answer_200_or_413(running: tuple[BlobServer, Path], declared: str) -> None:
    server, _ = running
    status, _ = send(server, "HEAD", "/upload", {"X-Content-Length": declared})
    digits = declared.lstrip("0")
    too_large = declared.isdigit() and (len(digits) > 9 or int(digits or "0") > 16 * 1024 * 1024)
    assert status == (413 if too_large else 200)
