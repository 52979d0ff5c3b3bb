"""The embedded Blossom server over real HTTP: what it serves, what it refuses and with which status, and that
a blob appears whole or not at all."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import aiohttp
import pytest

from eval_runner.nostr import SecretKey, authorization_event, sign
from eval_runner.nostr.blossom import upload_header
from eval_runner.nostr.nip98 import header_value
from eval_runner.service.blobs import BlobFiles, BlobServer, UsedAuthorizations

BODY = b"case manifest bytes\n" * 50
DIGEST = hashlib.sha256(BODY).hexdigest()


def nip98(secret: SecretKey, server: BlobServer, payload: str = DIGEST, *, created_at: int | None = None) -> str:
    when = int(time.time()) if created_at is None else created_at
    return header_value(authorization_event(secret, server.upload_url, "PUT", payload, when))


def headers(authorization: str | None, media_type: str | None = "application/json") -> dict[str, str]:
    found = {"X-SHA-256": DIGEST}
    if authorization is not None:
        found["Authorization"] = authorization
    if media_type is not None:
        found["Content-Type"] = media_type
    return found


async def put(
    http: aiohttp.ClientSession, server: BlobServer, sent: dict[str, str], body: bytes = BODY
) -> tuple[int, dict[str, object]]:
    async with http.put(server.upload_url, data=body, headers=sent) as response:
        return response.status, await response.json()


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file() or path.is_symlink())


async def test_unknown_blobs_are_404_to_get_and_head(blob_server: BlobServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{blob_server.url}/{DIGEST}") as response:
        assert response.status == 404
        assert (await response.json())["message"] == "no such blob"
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    async with http.head(f"{blob_server.url}/{DIGEST}") as response:
        assert response.status == 404
    async with http.get(f"{blob_server.url}/not-a-digest") as response:
        assert response.status == 404


async def test_a_valid_upload_is_201_then_200_and_then_served(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey, blob_root: Path
) -> None:
    status, descriptor = await put(http, blob_server, headers(nip98(uploader, blob_server)))
    assert status == 201
    url = f"{blob_server.url}/{DIGEST}"
    assert descriptor["url"] == url
    assert (descriptor["sha256"], descriptor["size"], descriptor["type"]) == (DIGEST, len(BODY), "application/json")
    assert isinstance(descriptor["uploaded"], int)
    assert descriptor["nip94"] == [["url", url], ["m", "application/json"], ["x", DIGEST], ["size", str(len(BODY))]]

    later = nip98(uploader, blob_server, created_at=int(time.time()) + 1)  # a distinct event: one second on
    status, again = await put(http, blob_server, headers(later, "text/plain"))
    assert status == 200
    assert again == descriptor  # the first upload's type stands

    async with http.get(url) as response:
        assert response.status == 200
        assert await response.read() == BODY
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["X-SHA-256"] == DIGEST
    async with http.head(url) as response:
        assert response.status == 200
        assert response.headers["Content-Length"] == str(len(BODY))
    async with http.get(f"{url}.json") as response:  # BUD-01: an extension is allowed and ignored
        assert await response.read() == BODY
    assert (blob_root / DIGEST[:2] / DIGEST).read_bytes() == BODY


async def test_a_bud02_upload_is_taken_and_its_authorization_only_once(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    now = int(time.time())
    authorization = upload_header(uploader, DIGEST, now, now + 60)
    assert (await put(http, blob_server, headers(authorization)))[0] == 201
    assert (await put(http, blob_server, headers(authorization)))[0] == 409


async def test_an_upload_without_authorization_is_401(blob_server: BlobServer, http: aiohttp.ClientSession) -> None:
    status, answer = await put(http, blob_server, headers(None))
    assert (status, answer["message"]) == (401, "an upload needs an Authorization header")


async def test_a_reused_authorization_is_409(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    authorization = nip98(uploader, blob_server)
    assert (await put(http, blob_server, headers(authorization)))[0] == 201
    status, answer = await put(http, blob_server, headers(authorization))
    assert (status, answer["message"]) == (409, "this authorization was already used")


async def test_a_payload_for_other_bytes_is_401(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey, blob_root: Path
) -> None:
    other = hashlib.sha256(b"other").hexdigest()
    status, answer = await put(http, blob_server, headers(nip98(uploader, blob_server, other)))
    assert (status, answer["message"]) == (401, "the authorization names other bytes than the body")
    assert files_under(blob_root) == []


async def test_an_authorization_outside_the_window_is_401(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    for created_at in (int(time.time()) - 120, int(time.time()) + 120):
        status, answer = await put(http, blob_server, headers(nip98(uploader, blob_server, created_at=created_at)))
        assert status == 401
        assert "more than 60 s from now" in str(answer["message"])


async def test_an_authorization_for_another_url_or_without_payload_is_401(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    elsewhere = header_value(authorization_event(uploader, "http://elsewhere/upload", "PUT", DIGEST, int(time.time())))
    assert (await put(http, blob_server, headers(elsewhere)))[0] == 401
    no_payload = header_value(
        sign(uploader, 27_235, [["u", blob_server.upload_url], ["method", "PUT"]], "", int(time.time()))
    )
    assert (await put(http, blob_server, headers(no_payload)))[0] == 401


async def test_a_key_not_on_the_allowlist_is_403(
    blob_server: BlobServer, http: aiohttp.ClientSession, stranger: SecretKey, blob_root: Path
) -> None:
    status, answer = await put(http, blob_server, headers(nip98(stranger, blob_server)))
    assert (status, answer["message"]) == (403, "this key may not upload here")
    now = int(time.time())
    assert (await put(http, blob_server, headers(upload_header(stranger, DIGEST, now, now + 60))))[0] == 403
    assert files_under(blob_root) == []


@pytest.mark.parametrize("media_type", [None, "", "not a type", "text/", "text/plain\u00e9"])
async def test_a_missing_or_malformed_content_type_is_400(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey, media_type: str | None
) -> None:
    sent = headers(nip98(uploader, blob_server), None)
    if media_type is not None:
        sent["Content-Type"] = media_type
    async with http.put(blob_server.upload_url, data=BODY, headers=sent, skip_auto_headers=["Content-Type"]) as answer:
        assert answer.status == 400


async def test_an_x_sha256_header_that_does_not_match_the_body_is_400(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    other = BODY + b"!"
    sent = headers(nip98(uploader, blob_server, hashlib.sha256(other).hexdigest()))
    assert (await put(http, blob_server, sent, other))[0] == 400
    sent = headers(nip98(uploader, blob_server)) | {"X-SHA-256": "xyz"}
    assert (await put(http, blob_server, sent))[0] == 400


async def test_a_body_over_the_bound_is_413_by_length_and_by_bytes(
    blob_root: Path, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    async with BlobServer(blob_root, [uploader.public_key().to_hex()], max_bytes=1024) as server:
        big = b"x" * 1025
        sent = {"Authorization": nip98(uploader, server, hashlib.sha256(big).hexdigest()), "Content-Type": "a/b"}
        async with http.put(server.upload_url, data=big, headers=sent) as response:
            assert response.status == 413

        async def chunked() -> object:
            for _ in range(64):
                yield b"y" * 512

        sent = {"Authorization": nip98(uploader, server, "0" * 64), "Content-Type": "a/b"}
        async with http.put(server.upload_url, data=chunked(), headers=sent) as response:
            assert response.status == 413
        assert files_under(blob_root) == []


async def test_ten_concurrent_uploads_of_one_blob_leave_one_intact_file(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey, blob_root: Path
) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB, so the writes overlap
    digest = hashlib.sha256(body).hexdigest()
    now = int(time.time())  # one second apart, so ten distinct authorization events
    sent = [
        headers(nip98(uploader, blob_server, digest, created_at=now - n)) | {"X-SHA-256": digest} for n in range(10)
    ]
    answers = await asyncio.gather(*(put(http, blob_server, one, body) for one in sent))
    assert sorted(status for status, _ in answers) == [200] * 9 + [201]
    assert {descriptor["sha256"] for _, descriptor in answers} == {digest}
    assert files_under(blob_root) == [blob_root / digest[:2] / digest, blob_root / digest[:2] / f"{digest}.type"]
    assert (blob_root / digest[:2] / digest).read_bytes() == body


async def test_an_upload_cut_off_mid_body_leaves_nothing_visible(
    blob_server: BlobServer, http: aiohttp.ClientSession, uploader: SecretKey, blob_root: Path
) -> None:
    body = b"z" * 200_000
    digest = hashlib.sha256(body).hexdigest()
    host, port = blob_server.url.removeprefix("http://").rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"PUT /upload HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: text/plain\r\n"
        f"Authorization: {nip98(uploader, blob_server, digest)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    async with http.get(f"{blob_server.url}/{digest}") as response:
        assert response.status == 404
    fresh = nip98(uploader, blob_server, digest, created_at=int(time.time()) + 1)
    status, _ = await put(http, blob_server, headers(fresh) | {"X-SHA-256": digest}, body)
    assert status == 201  # the cut-off upload never became the blob
    assert [path.name for path in files_under(blob_root)] == [digest, f"{digest}.type"]


async def test_a_behind_proxy_server_checks_u_against_its_public_url(
    blob_root: Path, http: aiohttp.ClientSession, uploader: SecretKey
) -> None:
    public = "https://blobs.example.com"
    async with BlobServer(blob_root, [uploader.public_key().to_hex()], public_url=public + "/") as server:
        assert (server.url, server.upload_url) == (public, public + "/upload")
        local = server.listening_url
        fresh = header_value(authorization_event(uploader, f"{local}/upload", "PUT", DIGEST, int(time.time())))
        async with http.put(f"{local}/upload", data=BODY, headers=headers(fresh)) as response:
            assert response.status == 401
        proxied = header_value(authorization_event(uploader, f"{public}/upload", "PUT", DIGEST, int(time.time())))
        async with http.put(f"{local}/upload", data=BODY, headers=headers(proxied)) as response:
            assert response.status == 201
            assert (await response.json())["url"] == f"{public}/{DIGEST}"


async def test_leftover_temp_files_are_dropped_at_start(blob_root: Path, uploader: SecretKey) -> None:
    (blob_root / "ab").mkdir(parents=True)
    leftover = blob_root / "ab" / f".{'ab' * 32}.0123456789abcdef.tmp"
    leftover.write_bytes(b"half")
    async with BlobServer(blob_root, [uploader.public_key().to_hex()]):
        assert not leftover.exists()


async def test_a_body_that_trickles_past_the_deadline_is_408(blob_root: Path, uploader: SecretKey) -> None:
    async with BlobServer(blob_root, [uploader.public_key().to_hex()], body_deadline=0.2) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"PUT /upload HTTP/1.1\r\nHost: {host}\r\nContent-Type: text/plain\r\n"
            f"Authorization: {nip98(uploader, server)}\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
            + BODY[:10]
        )
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.readuntil(b"\r\n\r\n")  # the answer comes; the rest of the body never does
        writer.close()
        await writer.wait_closed()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert files_under(blob_root) == []


def test_used_authorizations_are_forgotten_once_they_lapse_and_bounded_meanwhile() -> None:
    used = UsedAuthorizations(limit=2)
    assert used.claim("a", valid_until=100, now=50) == "fresh"
    assert used.claim("a", valid_until=100, now=100) == "reused"
    assert used.claim("b", valid_until=200, now=60) == "fresh"
    assert used.claim("c", valid_until=200, now=60) == "full"
    assert used.claim("c", valid_until=200, now=101) == "fresh"  # "a" lapsed at 100
    assert len(used) == 2
    assert used.claim("a", valid_until=300, now=101) == "full"


def test_a_type_left_by_a_crashed_upload_is_adopted_and_the_blob_stored_once(blob_root: Path) -> None:
    files = BlobFiles(blob_root)
    files.prepare()
    (blob_root / DIGEST[:2]).mkdir()
    (blob_root / DIGEST[:2] / f"{DIGEST}.type").symlink_to("text/markdown")
    stored, created = files.store(DIGEST, BODY, "text/plain")
    assert (created, stored.type, stored.size) == (True, "text/markdown", len(BODY))
    again, created = files.store(DIGEST, BODY, "text/plain")
    assert (created, again.path) == (False, stored.path)
    assert files.find("0" * 64) is None
    with pytest.raises(ValueError, match="64 lowercase hex"):
        files.path("../" + DIGEST[3:])
