"""Releases through real processes: `eval-runner serve` releases the catalog tool its key publishes when it
starts (and names the same event after a restart), and `eval-runner release DIR` publishes a test set
through that running `serve`, naming the same releases when run again (runner.md §3.1 step 5, §3.4).

`serve` runs over its embedded relay (LMDB under its state, so a restart keeps the events) and embedded
blob server, with a catalog of two tools: a copy of the example whose package names the runner key as
publisher, and the example itself, whose package names another publisher (said once, never released).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.package import Manifest, read_release
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.blobs import BlobStore
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases.publish import releases_filter
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.runner_tools import OURS, THEIRS, THEIRS_PUBLISHER, key_file, runner_published_copy
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import BOUND, DOOR_KEY, free_port, runner_env, serving

NOT_OURS = f"{THEIRS}: its package names the publisher {THEIRS_PUBLISHER}, not this runner"
TOOL_LINE = f"tool    {OURS} released as "


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def environment(tmp_path: Path, temp_root: Path, door: StandInDoor, secret: SecretKey) -> dict[str, str]:
    ours = runner_published_copy(tmp_path / "ours", secret.public_key().to_hex())
    return runner_env(
        tmp_path,
        temp_root,
        door_url=door.url,
        listen=f"127.0.0.1:{free_port()}",
        key_file=key_file(tmp_path / "keys" / "runner-key", secret),
        EVAL_RUNNER_CATALOG=f"{EXAMPLE}:{ours}",
    )


async def releases_on(url: str, runner: str) -> list[Event]:
    return await RelayClient(url, SecretKey.generate()).query(releases_filter(runner))


async def release_command(env: dict[str, str], *dirs: Path) -> tuple[int, str, str]:
    """`eval-runner release DIR…` as a subprocess: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eval_runner.cli",
        "release",
        *map(str, dirs),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(BOUND):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_serve_releases_its_own_tool_at_start_and_names_the_same_release_after_a_restart(
    tmp_path: Path, temp_root: Path
) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    async with StandInDoor(DOOR_KEY) as door:
        env = environment(tmp_path, temp_root, door, secret)
        async with serving(env) as first:
            url = await first.url()
            line = await first.wait_for(TOOL_LINE)
            release_id = line.removeprefix(TOOL_LINE)
            assert first.matching("tools   not released") == []
            assert first.matching(NOT_OURS) == [NOT_OURS]
            lines = first.lines
            assert lines.index(line) > lines.index(first.matching("liveness ")[0]), "after the startup lines"
            stored = await releases_on(url, runner)
            assert [event.id for event in stored] == [release_id]
            assert read_release(stored[0]).package == f"{runner}:codebase-brief"
            assert await first.terminate() == 0

        async with serving(env) as restarted:
            assert await restarted.wait_for(TOOL_LINE) == line
            assert [event.id for event in await releases_on(await restarted.url(), runner)] == [release_id]


async def test_release_publishes_a_test_set_through_the_running_serve_and_reuses_it_when_run_again(
    tmp_path: Path, temp_root: Path
) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    async with StandInDoor(DOOR_KEY) as door:
        env = environment(tmp_path, temp_root, door, secret)
        async with serving(env) as serve:
            url = await serve.url()
            tool_id = (await serve.wait_for(TOOL_LINE)).removeprefix(TOOL_LINE)
            blobs_url = (await serve.wait_for("blobs   embedded at ")).split()[-1]

            code, out, err = await release_command(env, EXAMPLE)
            assert (code, err) == (0, f"{NOT_OURS}\n")
            tool_line, suite_line = out.splitlines()
            assert tool_line == f"{OURS} (tool) {tool_id} (already released)", "serve released it at start"
            prefix = f"{THEIRS} {runner}:codebase-brief-tests "
            assert suite_line.startswith(prefix)
            assert not suite_line.endswith("(already released)")
            suite_id = suite_line.removeprefix(prefix)

            code, again, _ = await release_command(env, EXAMPLE)
            assert code == 0
            assert again.splitlines() == [tool_line, f"{suite_line} (already released)"]

            stored = {json.loads(event.content)["package"]: event for event in await releases_on(url, runner)}
            assert {package: event.id for package, event in stored.items()} == {
                f"{runner}:codebase-brief": tool_id,
                f"{runner}:codebase-brief-tests": suite_id,
            }
            release = read_release(stored[f"{runner}:codebase-brief-tests"])
            async with BlobStore([blobs_url]) as store:
                manifest = Manifest.parse_bytes(await store.fetch(release.manifest.digest))
                paths = [file.path for file in manifest.files]
                assert paths[:2] == ["suite.json", "cases.json"]
                assert "evals/overview/fixtures/src/tables.rs" in paths
                for file in manifest.files:
                    data = await store.fetch(file.digest)
                    if file.path.startswith("evals/"):
                        assert data == (EXAMPLE / file.path).read_bytes(), file.path


async def test_serve_whose_tool_release_fails_says_so_in_one_line_and_still_serves(
    tmp_path: Path, temp_root: Path
) -> None:
    secret = SecretKey.generate()
    async with StandInDoor(DOOR_KEY) as door:
        nowhere = f"http://127.0.0.1:{free_port()}"
        env = {**environment(tmp_path, temp_root, door, secret), "EVAL_RUNNER_BLOSSOM": nowhere}
        async with serving(env) as serve:
            line = await serve.wait_for("tools   not released: ")
            assert line.startswith("tools   not released: uploading manifest.json: ")
            assert serve.matching("tool    ") == []
            assert await releases_on(await serve.url(), secret.public_key().to_hex()) == []
            assert serve.process.returncode is None, "serve still runs (it has subscribed)"
