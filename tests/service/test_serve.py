"""`eval-runner serve` and `check` as real subprocesses: the startup lines, the runner key generated once
(0600) for the embedded relay and required for an external one, a graceful stop, `check` leaving the state
directory exactly as it was, and systemd's READY=1 and WATCHDOG=1 from the real process.

The whole hosted path through `serve` (runs in sandboxes, a crash and a restart, catch-up, the secret
scan) is in `tests/e2e`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import eval_runner.service.check as check_module
import eval_runner.service.serve as serve_module
from eval_runner.contracts.hosted import RUNNER
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.config import Config
from eval_runner.service.ledger.store import Claim, Ledger, ledger_path
from eval_runner.service.serve import ServeError, sandbox_text
from tests.support.captured_logs import LogLines
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import (
    AGENT,
    BOUND,
    SUBSCRIBED,
    ServeProcess,
    runner_env,
    serving,
)
from tests.support.trainer_side import Trainer, catalog_tool, draft, run_input

NO_DOOR = "http://127.0.0.1:9"


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()  # fails the test plainly on a host that cannot confine
    yield from fresh_temp_root()


def env_for(tmp_path: Path, temp_root: Path, **extra: str) -> dict[str, str]:
    return {**runner_env(tmp_path, temp_root, door_url=NO_DOOR, listen="127.0.0.1:0"), **extra}


async def test_serve_generates_its_key_once_prints_the_startup_lines_and_stops_on_sigterm(
    tmp_path: Path, temp_root: Path
) -> None:
    env = env_for(tmp_path, temp_root, EVAL_RUNNER_PROBE_MS="300", EVAL_RUNNER_RENEW_MS="2700000")
    state = tmp_path / "state"
    key_file = state / "runner-key"
    async with serving(env) as first:
        runner = await first.runner()
        url = await first.url()
        blobs = first.lines[3].removeprefix("blobs   embedded at ")
        assert first.lines == [
            f"generated the runner key in {key_file}",
            f"runner  {runner}",
            f"relay   embedded at {url}",
            f"blobs   embedded at {blobs}",
            "catalog Codebase brief",
            f"agent   {_digest(AGENT)}",
            f"sandbox {sandbox_text(host_confinement())}",
            "limits  no usage limit; 2 suites and 2 runs at once",
            "disk    each run may write 1024 MiB; no new runs below 1024 MiB free",
            f"usage   {state / 'usage'}",
            "liveness a probe every 0.3 s; the subscription is renewed every 2700 s",
            "Codebase brief: its package names the publisher eval-runner examples, not this runner",
            "defaults none published; the baseline arm admits nothing",
            SUBSCRIBED,
        ]
        assert url.startswith("ws://127.0.0.1:")
        assert not url.endswith(":0")
        assert blobs.startswith("http://127.0.0.1:")
        assert not blobs.endswith(":0")
        async with aiohttp.ClientSession() as http, http.head(f"{blobs}/{'0' * 64}") as missing:
            assert missing.status == 404, "the embedded blob server answers where the blobs line says"
        assert await first.terminate() == 0
    assert first.lines[-2:] == [
        "stopping: no new requests; runs in flight finish first (signal again to stop them now)",
        "stopped",
    ]
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    text = key_file.read_text()
    assert text == SecretKey.parse(text.strip()).to_hex() + "\n"
    assert SecretKey.parse(text.strip()).public_key().to_hex() == runner
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state / "relay" / "data.mdb").is_file(), "the embedded relay keeps its events under the state"

    async with serving(env) as second:
        assert await second.runner() == runner
        assert second.matching("generated") == [], "an existing key is loaded, never generated again"
    pubkey = await ServeProcess.start(env, "pubkey")
    assert await pubkey.exit_code() == 0
    assert await pubkey.stdout() == runner + "\n"


async def test_with_an_external_relay_the_key_file_must_exist(tmp_path: Path, temp_root: Path) -> None:
    env = env_for(tmp_path, temp_root, EVAL_RUNNER_RELAY="ws://127.0.0.1:9")
    missing = tmp_path / "home" / ".openagents" / "nostr" / "eval-runner-key"
    process = await ServeProcess.start(env)
    assert await process.exit_code() == 1
    assert process.lines == [f"eval-runner: the runner key {missing}: No such file or directory"]
    assert not missing.exists(), "a key is never generated for an external relay"
    assert not (tmp_path / "state").exists(), "nothing is made before the runner can start"


async def test_a_configuration_error_exits_1_with_the_message(tmp_path: Path, temp_root: Path) -> None:
    env = env_for(tmp_path, temp_root, EVAL_RUNNER_CONCURRENCY="9")
    for command in ("serve", "check"):
        process = await ServeProcess.start(env, command)
        assert await process.exit_code() == 1
        assert process.lines == ["eval-runner: EVAL_RUNNER_CONCURRENCY must be from 1 to 8"]


async def test_a_second_runner_over_the_same_state_stops_at_the_ledger(tmp_path: Path, temp_root: Path) -> None:
    async with serving(env_for(tmp_path, temp_root)):
        second = await ServeProcess.start(env_for(tmp_path, temp_root))
        assert await second.exit_code() == 1
        assert second.lines == ["eval-runner: another process has this runner key's ledger open"]


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every path under `directory`: its bytes (files), mode and mtime in ns."""
    found: dict[str, tuple[bytes, int, int]] = {}
    for path in sorted(directory.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        found[str(path.relative_to(directory))] = (data, info.st_mode, info.st_mtime_ns)
    return found


async def test_check_prints_what_would_run_and_changes_nothing(tmp_path: Path, temp_root: Path) -> None:
    env = env_for(tmp_path, temp_root)
    state = tmp_path / "state"
    async with serving(env) as served:  # a state directory as serve leaves it: key, ledger, relay store
        runner = await served.runner()
        assert await served.terminate() == 0
    # An interrupted run in the ledger: serve would answer it unknown on its next start; check must not.
    catalog = Catalog.load([EXAMPLE])
    definition = catalog.tools[0].definition.to_json()
    trainer = Trainer("ws://unused", runner)
    body = trainer.body(run_input(definition, draft(catalog_tool(definition))), "req-interrupted")
    now = int(time.time())
    with Ledger.open(ledger_path(state), runner, now) as ledger:
        claim = ledger.prepare(body, "e" * 64, trainer.pubkey, now, "ab" * 32, created_at=now)
        assert isinstance(claim, Claim)
        key = claim.key
        ledger.acknowledge(key)
        ledger.intend(key)
    before = _snapshot(state)
    temp_before = sorted(temp_root.iterdir())

    for closed in (False, True):
        if closed:
            (state / "closed").touch()
            before = _snapshot(state)
        process = await ServeProcess.start(env, "check")
        assert await process.exit_code() == 0, process.text
        lines = (await process.stdout()).splitlines()
        assert process.lines == []
        assert _snapshot(state) == before, "check wrote under the state directory"
        assert sorted(temp_root.iterdir()) == temp_before, "check left something in the temp root"
        tool = catalog.tools[0]
        assert lines == [
            f"runner   {runner}",
            f"warning  the app sends to {RUNNER}; this key is another",
            "relay    embedded at ws://127.0.0.1:0",
            "blobs    embedded at http://127.0.0.1:0",
            "door     default/stand-in",
            "decision none",
            f"agent    {AGENT} ({_digest(AGENT)})",
            f"sandbox  {sandbox_text(host_confinement())}",
            f"catalog  {tool.name} {tool.definition.id}",
            "limits   no usage limit; 2 suites and 2 runs at once",
            "disk     each run may write 1024 MiB; no new runs below 1024 MiB free",
            f"usage    {state / 'usage'}",
            "admission closed (remove the closed file to open it)" if closed else "admission open",
        ]
    with sqlite3.connect(f"file:{ledger_path(state)}?mode=ro", uri=True) as db:
        outcome = db.execute("SELECT outcome, dispatch_intent FROM claims WHERE key = ?", (key,)).fetchone()
    assert outcome == (None, 1), "the interrupted claim is still serve's to settle"


async def test_check_before_the_first_start_says_the_key_is_yet_to_be_made(tmp_path: Path, temp_root: Path) -> None:
    env = env_for(tmp_path, temp_root)
    process = await ServeProcess.start(env, "check")
    assert await process.exit_code() == 0, process.text
    lines = (await process.stdout()).splitlines()
    assert lines[0] == f"runner   none yet: serve generates {tmp_path / 'state' / 'runner-key'}"
    assert lines[1].startswith("relay    ")
    assert not (tmp_path / "state").exists()


async def test_serve_tells_systemd_it_is_ready_and_pets_the_watchdog_per_answered_probe(
    tmp_path: Path, temp_root: Path
) -> None:
    path = temp_root / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(path))
        notify.setblocking(False)
        env = env_for(tmp_path, temp_root, NOTIFY_SOCKET=str(path), EVAL_RUNNER_PROBE_MS="500")
        async with serving(env, subscribed=False) as process:
            loop = asyncio.get_running_loop()
            received: list[bytes] = []
            async with asyncio.timeout(BOUND):
                while len(received) < 4:
                    received.append(await loop.sock_recv(notify, 64))
            assert process.matching(SUBSCRIBED), "READY=1 comes with the confirmed subscription"
    assert received == [b"READY=1", b"WATCHDOG=1", b"WATCHDOG=1", b"WATCHDOG=1"]


def _digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_service_commands_refuse_a_wrong_command_line_with_64(tmp_path: Path) -> None:
    """The service commands are argparse subcommands like the others: a wrong word is a usage error (64)
    of that command, never ignored; a command that could not do its work is `eval-runner: …`, exit 1."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}

    def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "eval_runner.cli", *arguments]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=BOUND, check=False)

    wrong = cli("usage", "--by", "week")
    assert (wrong.returncode, wrong.stdout) == (64, "")
    assert wrong.stderr.endswith(
        "eval-runner usage: error: argument --by: must be key, action, subject, day or outcome, not 'week'\n"
    )
    empty = cli("usage", "--json", "--dir", str(tmp_path))
    assert empty.returncode == 0
    assert json.loads(empty.stdout)[0]["jobs"] == 0
    shown = cli("serve", "--help")
    assert shown.returncode == 0
    assert shown.stdout.startswith("usage: eval-runner serve [-h]\n")
    for command in ("serve", "check", "pubkey"):
        extra = cli(command, "ignored")
        assert (extra.returncode, extra.stdout) == (64, ""), command
        assert extra.stderr == (
            f"usage: eval-runner {command} [-h]\neval-runner {command}: error: unrecognized arguments: ignored\n"
        )
    missing = cli("pubkey")
    path = tmp_path / ".openagents" / "eval-runner" / "runner-key"
    assert (missing.returncode, missing.stderr) == (
        1,
        f"eval-runner: the runner key {path}: No such file or directory\n",
    )


async def test_an_unconfined_host_starts_nothing(
    tmp_path: Path, temp_root: Path, monkeypatch: pytest.MonkeyPatch, logs: LogLines
) -> None:
    """The host's sandbox backend is outside our control, so its verdict is stood in for here."""

    async def stand_in_unconfined(root: Path, **_: object) -> Unconfined:
        return Unconfined("bubblewrap is inoperable: no user namespaces")

    monkeypatch.setattr(serve_module, "probe", stand_in_unconfined)
    monkeypatch.setattr(check_module, "probe", stand_in_unconfined)
    config = Config.from_env(env_for(tmp_path, temp_root))
    with pytest.raises(ServeError) as raised:
        await serve_module.serve(config, stop=asyncio.Event())
    assert str(raised.value) == "unconfined_host: bubblewrap is inoperable: no user namespaces"
    assert logs.lines == []
    assert not (tmp_path / "state").exists(), "no key, ledger or relay before the host is proven"
    with pytest.raises(ServeError, match=r"^unconfined_host: bubblewrap is inoperable"):
        await asyncio.to_thread(check_module.check, config)
