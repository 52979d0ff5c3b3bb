"""`eval-runner release DIR…` in process (runner.md §3.4): usage errors exit 64; with the embedded relay and
nothing listening where the configuration says, it refuses at once and says `serve` must run; against an
external relay (nostr-sdk's LocalRelay) and a named Blossom server (the embedded one, started here), it
prints the runner's tool line and each test set's line, says `(already released)` when run again with the
same ids, and stops at the first directory that is no extension (exit 1, one line).

The command itself runs in a worker thread (it runs its own event loop, as the console script does) while
the relay and blob server run on the test's loop. The end-to-end form, against a running `serve`, is in
`tests/e2e/test_release.py`.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from eval_runner.cli.main import main
from eval_runner.cli.release import NO_DIRECTORY, release_main
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.formats import load_test_set
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.blobs import BlobServer
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import suite_release
from eval_runner.service.releases.publish import releases_filter
from tests.support.captured_logs import captured_logs
from tests.support.paths import EXAMPLE, REFERENCE
from tests.support.runner_tools import OURS, THEIRS, THEIRS_PUBLISHER, key_file, runner_published_copy
from tests.support.serve_process import free_port, runner_env
from tests.support.stand_in_relay import local_relay


def in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def released(dirs: Sequence[Path], env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = release_main(dirs, stdout=out, stderr=err, environ=env)
    return code, out.getvalue(), err.getvalue()


def test_no_directory_is_a_usage_error() -> None:
    code, out, err = in_process(["release"])
    assert (code, out) == (64, "")
    assert err.startswith("usage: eval-runner release ")
    assert err.endswith(f"eval-runner release: error: {NO_DIRECTORY}\n")


def test_with_the_embedded_relay_and_no_serve_running_it_says_serve_must_run(tmp_path: Path) -> None:
    port = free_port()
    secret = SecretKey.generate()
    env = runner_env(
        tmp_path,
        tmp_path,
        door_url="http://127.0.0.1:9",
        listen=f"127.0.0.1:{port}",
        key_file=key_file(tmp_path / "key", secret),
    )
    code, out, err = released([EXAMPLE], env)
    assert (code, out) == (1, "")
    assert err == (
        f"eval-runner: nothing answers at ws://127.0.0.1:{port}, the embedded relay: release publishes through "
        "a running `eval-runner serve` of this configuration; start it first\n"
    )
    assert secret.to_hex() not in err


def test_an_embedded_relay_on_any_free_port_cannot_be_found(tmp_path: Path) -> None:
    env = runner_env(tmp_path, tmp_path, door_url="http://127.0.0.1:9", listen="127.0.0.1:0")
    code, out, err = released([EXAMPLE], env)
    assert (code, out) == (1, "")
    assert "the embedded relay listens on any free port (EVAL_RUNNER_LISTEN names port 0)" in err


@dataclass
class Published:
    """A relay and a Blossom server elsewhere, the runner's key, and the configuration naming them."""

    env: dict[str, str]
    runner: str
    relay: RelayClient

    async def releases(self) -> list[Event]:
        return await self.relay.query(releases_filter(self.runner))


@pytest_asyncio.fixture
async def published(tmp_path: Path) -> AsyncIterator[Published]:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    ours = runner_published_copy(tmp_path / "ours", runner)
    async with local_relay() as url, BlobServer(tmp_path / "blobs", [runner]) as server:
        env = runner_env(
            tmp_path,
            tmp_path,
            door_url="http://127.0.0.1:9",
            relay=url,
            key_file=key_file(tmp_path / "key", secret),
            EVAL_RUNNER_BLOSSOM=server.url,
            EVAL_RUNNER_CATALOG=f"{EXAMPLE}:{ours}",
        )
        yield Published(env, runner, RelayClient(url, SecretKey.generate()))


async def test_it_releases_the_runners_tools_then_each_test_set_and_says_when_it_reused_them(
    published: Published,
) -> None:
    with captured_logs() as logs:
        code, out, err = await asyncio.to_thread(released, [EXAMPLE], published.env)
    assert (code, err) == (0, "")
    tool_line, suite_line = out.splitlines()
    name, tool_id = tool_line.rsplit(" ", 1)
    assert name == f"{OURS} (tool)"
    assert suite_line.startswith(f"{THEIRS} {published.runner}:codebase-brief-tests ")
    suite_id = suite_line.rsplit(" ", 1)[1]
    assert logs.matching("not this runner") == [
        f"{THEIRS}: its package names the publisher {THEIRS_PUBLISHER}, not this runner"
    ]
    stored = await published.releases()
    assert sorted(event.id for event in stored) == sorted([tool_id, suite_id])
    packages = {json.loads(event.content)["package"]: event.id for event in stored}
    assert packages == {
        f"{published.runner}:codebase-brief": tool_id,
        f"{published.runner}:codebase-brief-tests": suite_id,
    }

    code, again, err = await asyncio.to_thread(released, [EXAMPLE], published.env)
    assert (code, err) == (0, "")
    assert again.splitlines() == [f"{tool_line} (already released)", f"{suite_line} (already released)"]
    assert len(await published.releases()) == 2


async def test_the_gate_in_gym_gates_dir_is_the_one_a_released_suite_names(
    published: Published, tmp_path: Path
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "ext-eval-v2.json").write_bytes((REFERENCE / "gates" / "ext-eval-v2.json").read_bytes() + b"\n")
    code, shipped, _ = await asyncio.to_thread(released, [EXAMPLE], published.env)
    code_gym, named, _ = await asyncio.to_thread(released, [EXAMPLE], {**published.env, "GYM_GATES_DIR": str(gates)})
    assert (code, code_gym) == (0, 0)
    assert shipped.splitlines()[1] != named.splitlines()[1], "another gate is another suite and another release"
    missing = {**published.env, "GYM_GATES_DIR": str(tmp_path / "nowhere")}
    code, _, err = await asyncio.to_thread(released, [EXAMPLE], missing)
    assert code == 1
    assert err == f"eval-runner: GYM_GATES_DIR {tmp_path / 'nowhere' / 'ext-eval-v2.json'}: No such file or directory\n"


async def test_a_directory_that_is_no_extension_stops_it_with_one_line(published: Published, tmp_path: Path) -> None:
    code, out, err = await asyncio.to_thread(released, [tmp_path / "nothing", EXAMPLE], published.env)
    assert code == 1
    assert out.splitlines()[0].startswith(f"{OURS} (tool) "), "the tools were released before the directories"
    assert len(out.splitlines()) == 1
    assert err.startswith(f"eval-runner: {tmp_path / 'nothing' / 'package.json'}: ")
    assert err.count("\n") == 1


async def test_a_test_set_that_does_not_load_names_its_directory(published: Published, tmp_path: Path) -> None:
    broken = runner_published_copy(tmp_path / "broken", "eval-runner examples", name="Broken")
    (broken / "evals" / "greeting" / "prompt.md").write_text("no front matter\n")
    code, _, err = await asyncio.to_thread(released, [broken], published.env)
    assert code == 1
    assert err.startswith(f"eval-runner: {broken / 'evals'}: greeting/prompt.md")


@pytest.mark.parametrize("variable", ["EVAL_RUNNER_CODER", "CODER_DOOR_KEY"])
def test_it_needs_the_full_configuration(tmp_path: Path, variable: str) -> None:
    env = runner_env(tmp_path, tmp_path, door_url="http://127.0.0.1:9", listen=f"127.0.0.1:{free_port()}")
    del env[variable]
    code, out, err = released([EXAMPLE], env)
    assert (code, out) == (1, "")
    assert err.startswith("eval-runner: ")
    assert variable in err


async def test_a_blob_store_that_does_not_answer_stops_it_before_any_release(published: Published) -> None:
    nowhere = {**published.env, "EVAL_RUNNER_BLOSSOM": f"http://127.0.0.1:{free_port()}"}
    code, out, err = await asyncio.to_thread(released, [EXAMPLE], nowhere)
    assert (code, out) == (1, "")
    assert err.startswith("eval-runner: tools not released: uploading manifest.json: ")
    assert await published.releases() == []


async def test_a_skill_directorys_evals_json_is_the_test_set_it_releases(published: Published, tmp_path: Path) -> None:
    skill = tmp_path / "brief"
    shutil.copytree(EXAMPLE.parent / "brief", skill)
    for case in ("overview", "greeting"):
        shutil.rmtree(skill / "evals" / case)  # only evals/evals.json is left
    code, out, err = await asyncio.to_thread(released, [skill], published.env)
    assert (code, err) == (0, "")
    suite_line = out.splitlines()[1]
    assert suite_line.startswith(f"brief {published.runner}:brief-tests ")
    stored = {event.id: event for event in await published.releases()}
    event = stored[suite_line.rsplit(" ", 1)[1]]
    suite = load_test_set(skill, skill_name="brief").suite
    assert [case.name for case in suite.cases] == ["eval-1", "eval-2"]
    expected = suite_release(suite, author=published.runner, package="brief-tests", gate_file=gate_file())
    assert event.content == expected.content


async def test_a_bad_evals_json_stops_it_naming_the_directory(published: Published, tmp_path: Path) -> None:
    skill = tmp_path / "brief"
    shutil.copytree(EXAMPLE.parent / "brief", skill)
    for case in ("overview", "greeting"):
        shutil.rmtree(skill / "evals" / case)
    (skill / "evals" / "evals.json").write_text('{"skill_name": "brief", "evals": []}')
    code, _, err = await asyncio.to_thread(released, [skill], published.env)
    assert code == 1
    assert err.startswith(f"eval-runner: {skill}: evals/evals.json")
