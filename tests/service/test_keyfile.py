"""The runner key file (runner.md §2.3, §3.3): the owner-only rule with its exact message, the accepted
spellings and the refusals, generation that writes 0600 and never overwrites, and `pubkey`."""

from __future__ import annotations

import io
import os
import stat
import threading
from pathlib import Path

import pytest

from eval_runner.nostr.bech32 import bech32_encode
from eval_runner.nostr.keys import SecretKey
from eval_runner.service.keyfile import KeyFileError, ensure_key, load_key, parse_key_text, pubkey_main

HEX = "7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a"
KEY = SecretKey.parse(HEX)
ORDER_N = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"


def write_key(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(KeyFileError) as caught:
        load_key(path)
    return str(caught.value)


@pytest.mark.parametrize("text", [HEX, HEX + "\n", f"  {HEX}\r\n", KEY.to_bech32(), KEY.to_bech32() + "\n"], ids=repr)
def test_hex_and_nsec_load(tmp_path: Path, text: str) -> None:
    loaded = load_key(write_key(tmp_path / "key", text))
    assert loaded == KEY
    assert loaded.public_key() == KEY.public_key()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o601, 0o610, 0o700 | 0o020, 0o666])
def test_a_key_others_can_open_is_refused_before_it_is_read(tmp_path: Path, mode: int) -> None:
    path = write_key(tmp_path / "key", HEX, mode)
    assert refusal(path) == f"the runner key {path} is readable by others; chmod 600 it"


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_modes_load(tmp_path: Path, mode: int) -> None:
    assert load_key(write_key(tmp_path / "key", HEX, mode)) == KEY


def test_a_missing_key_names_the_file_and_the_error(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert refusal(path) == f"the runner key {path}: No such file or directory"


def test_a_directory_in_place_of_the_key(tmp_path: Path) -> None:
    path = tmp_path / "dir"
    path.mkdir(mode=0o700)
    assert refusal(path) == f"the runner key {path}: Is a directory"


def test_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    path = write_key(tmp_path / "key", b"\xff" * 64)
    assert refusal(path) == f"the runner key {path}: the file is not UTF-8 text"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEX.upper(), "the runner key must be 64 lowercase hex or an nsec"),
        (HEX[:63], "the runner key must be 64 lowercase hex or an nsec"),
        (HEX + "0", "the runner key must be 64 lowercase hex or an nsec"),
        ("", "the runner key must be 64 lowercase hex or an nsec"),
        (KEY.public_key().to_bech32(), "the runner key must be 64 lowercase hex or an nsec"),
        (KEY.to_bech32().upper(), "the runner key must be 64 lowercase hex or an nsec"),
        (f"{HEX[:32]} {HEX[32:]}", "the runner key must be 64 lowercase hex or an nsec"),
        ("0" * 64, "the runner key is not a valid secret key"),
        (ORDER_N, "the runner key is not a valid secret key"),
        (bech32_encode("nsec", bytes(32)), "the runner key is not a valid secret key"),
        (bech32_encode("nsec", bytes(range(1, 32))), "the runner key does not decode: an nsec holds 32 bytes"),
        (KEY.to_bech32()[:-1] + ("q" if KEY.to_bech32()[-1] != "q" else "p"), "the runner key does not decode: "),
        ("nsec1" + "b" * 58, "the runner key does not decode: "),
    ],
    ids=lambda value: value[:24] if isinstance(value, str) else value,
)
def test_text_that_is_not_a_key(tmp_path: Path, text: str, message: str) -> None:
    got = refusal(write_key(tmp_path / "key", text))
    assert got.startswith(message) if message.endswith(": ") else got == message
    assert not text or text not in got  # the text may be a secret: never echoed
    with pytest.raises(KeyFileError):
        parse_key_text(text)


def test_parse_names_its_source() -> None:
    with pytest.raises(KeyFileError, match=r"^EVAL_SECRET must be 64 lowercase hex or an nsec$"):
        parse_key_text("nope", "EVAL_SECRET")


# --- generation ---------------------------------------------------------------------------------------


def test_a_missing_key_is_generated_owner_only_in_a_private_directory(tmp_path: Path) -> None:
    path = tmp_path / "state" / "runner-key"
    key, generated = ensure_key(path)
    assert generated
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert text == key.to_hex() + "\n"
    assert load_key(path) == key
    assert sorted(os.listdir(path.parent)) == ["runner-key"]


def test_an_existing_key_is_loaded_and_never_overwritten(tmp_path: Path) -> None:
    path = write_key(tmp_path / "runner-key", HEX)
    key, generated = ensure_key(path)
    assert (key, generated) == (KEY, False)
    assert path.read_text() == HEX
    again, generated_again = ensure_key(path)
    assert (again, generated_again) == (KEY, False)


def test_an_existing_key_others_can_read_is_refused_not_replaced(tmp_path: Path) -> None:
    path = write_key(tmp_path / "runner-key", HEX, 0o644)
    with pytest.raises(KeyFileError, match=r"is readable by others; chmod 600 it$"):
        ensure_key(path)
    assert path.read_text() == HEX


def test_an_existing_broken_key_is_refused_not_replaced(tmp_path: Path) -> None:
    path = write_key(tmp_path / "runner-key", "")
    with pytest.raises(KeyFileError, match=r"must be 64 lowercase hex or an nsec$"):
        ensure_key(path)
    assert path.read_bytes() == b""


def test_generation_under_a_loose_umask_is_still_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        ensure_key(tmp_path / "k" / "runner-key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k" / "runner-key").stat().st_mode) == 0o600


def test_racing_starts_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "runner-key"
    gate = threading.Barrier(12)
    results: list[tuple[SecretKey, bool]] = []
    lock = threading.Lock()

    def start() -> None:
        gate.wait()
        got = ensure_key(path)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=start) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 12
    assert sum(generated for _, generated in results) == 1
    assert {key.to_hex() for key, _ in results} == {load_key(path).to_hex()}
    assert os.listdir(tmp_path) == ["runner-key"]


def test_a_key_that_cannot_be_written_says_where(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(KeyFileError) as caught:
        ensure_key(blocker / "runner-key")
    assert str(caught.value) == f"the runner key {blocker / 'runner-key'}: {blocker}: File exists"


# --- pubkey -------------------------------------------------------------------------------------------


def run_pubkey(environ: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = pubkey_main(stdout=out, stderr=err, environ=environ)
    return code, out.getvalue(), err.getvalue()


def test_pubkey_prints_the_named_key(tmp_path: Path) -> None:
    path = write_key(tmp_path / "k", HEX)
    assert run_pubkey({"EVAL_RUNNER_KEY_FILE": str(path)}) == (0, KEY.public_key().to_hex() + "\n", "")


def test_pubkey_with_an_external_relay_reads_the_home_key(tmp_path: Path) -> None:
    key_dir = tmp_path / ".openagents" / "nostr"
    key_dir.mkdir(parents=True)
    write_key(key_dir / "eval-runner-key", KEY.to_bech32())
    environ = {"HOME": str(tmp_path), "EVAL_RUNNER_RELAY": "wss://relay.example"}
    assert run_pubkey(environ) == (0, KEY.public_key().to_hex() + "\n", "")


def test_pubkey_with_the_embedded_relay_reads_the_state_key_and_never_makes_one(tmp_path: Path) -> None:
    environ = {"EVAL_RUNNER_STATE": str(tmp_path)}
    code, out, err = run_pubkey(environ)
    missing = tmp_path / "runner-key"
    assert (code, out, err) == (
        1,
        "",
        f"eval-runner: the runner key {missing}: No such file or directory\n",
    )
    assert not missing.exists()
    generated, _ = ensure_key(missing)
    assert run_pubkey(environ) == (0, generated.public_key().to_hex() + "\n", "")


def test_pubkey_refuses_a_key_others_can_read(tmp_path: Path) -> None:
    path = write_key(tmp_path / "k", HEX, 0o640)
    code, out, err = run_pubkey({"EVAL_RUNNER_KEY_FILE": str(path)})
    assert (code, out) == (1, "")
    assert err == f"eval-runner: the runner key {path} is readable by others; chmod 600 it\n"
