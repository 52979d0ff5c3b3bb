"""The stand-in agent as a real child: bare /usr/bin/python3, only the contract's environment, its door
reached through a real DoorProxy on a Unix socket via a loopback relay (as the sandbox's bridge does),
the stand-in door behind it."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import eval_runner.stand_ins.agent as stand_in_agent_module
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.trajectory import Trajectory, read_trajectory
from eval_runner.stand_ins.door import GREETING_REPLY, SKILLED_REPLY, UNSKILLED_REPLY, StandInDoor

AGENT = Path(stand_in_agent_module.__file__)
PYTHON = "/usr/bin/python3"
REAL_KEY = "sk-the-real-door-key-42"
SKILL = "When asked about a repository, name its main language and its largest file.\n"
REPOSITORY_PROMPT = "Give me a short overview of the repository in this directory."
PROGRAM = {
    "definition": {"id": "x:openagents/repo-map-brief", "steps": [{"name": "repo_map", "kind": "module"}]},
    "binding": {"steps": {"repo_map": {"module": {"operation": "map", "profile": "snapshot-read"}}}},
}

pytestmark = pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason="needs /usr/bin/python3")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except ConnectionError:
        pass


@dataclass
class Rig:
    door: StandInDoor
    proxy: DoorProxy
    url: str
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def trace(self) -> Path:
        return self.root / "out" / "trajectory.atif.jsonl"

    def environment(self, *, programs: bool, guidance: str | None, digest: str | None = None) -> dict[str, str]:
        env = {
            "HOME": str(self.home),
            "OPENAGENTS_HOME": str(self.home / ".openagents"),
            "TMPDIR": str(self.root / "tmp"),
            "TMP": str(self.root / "tmp"),
            "CODER_TRACE_DIR": str(self.root / "out" / "trace"),
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
            "LANG": "en_US.UTF-8",
            "USER": "eval",
            "LOGNAME": "eval",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "GIT_CEILING_DIRECTORIES": str(self.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "CODER_DOOR_URL": self.url,
            "CODER_DOOR_KEY": self.proxy.token,
            "CODER_MODEL": "stand-in/model",
            "CODER_DELEGATE": "off",
            "CODER_SHELL": "off",
            "CODER_PROGRAMS": "repo-map-brief" if programs else "none",
        }
        if programs:
            env["CODER_PROGRAM_EFFECTS"] = "reads,writes"
        if guidance is not None:
            path = self.root / "guidance.md"
            path.write_text(guidance)
            env["CODER_GUIDANCE"] = str(path)
            env["CODER_GUIDANCE_DIGEST"] = digest or "sha256:" + hashlib.sha256(guidance.encode()).hexdigest()
        return env

    async def start(self, prompt: str, env: dict[str, str]) -> asyncio.subprocess.Process:
        (self.root / "prompt.md").write_text(prompt)
        return await asyncio.create_subprocess_exec(
            PYTHON,
            str(AGENT),
            "--prompt-file",
            str(self.root / "prompt.md"),
            "--trace",
            str(self.trace),
            "--json",
            env=env,
            cwd=self.home / "cwd",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    async def run(self, prompt: str, env: dict[str, str]) -> Ran:
        child = await self.start(prompt, env)
        out, err = await asyncio.wait_for(child.communicate(), timeout=60)
        assert REAL_KEY.encode() not in out + err
        summary = json.loads(out.decode().strip().splitlines()[-1])
        trajectory = read_trajectory(self.trace, whole=True) if self.trace.exists() else None
        return Ran(child.returncode, out.decode(), summary, trajectory)


@dataclass
class Ran:
    returncode: int | None
    stdout: str
    summary: dict[str, Any]
    trajectory: Trajectory | None


async def make_rig(key: str) -> AsyncIterator[Rig]:
    socket_dir = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp"))
    root = Path(tempfile.mkdtemp(prefix="oa-eval-"))
    for sub in ("home/cwd", "home/.openagents/programs", "home/.openagents/questions", "out/trace", "tmp"):
        (root / sub).mkdir(parents=True)

    async def bridge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(socket_dir / "door.sock"))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        up_writer.close()
        writer.close()

    async with StandInDoor(REAL_KEY) as door, DoorProxy(door.url, key, socket_dir / "door.sock") as proxy:
        server = await asyncio.start_server(bridge, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield Rig(door, proxy, f"http://127.0.0.1:{port}", root)
        finally:
            server.close()
            await server.wait_closed()
    shutil.rmtree(socket_dir, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async for made in make_rig(REAL_KEY):
        yield made


def admit_program(rig: Rig) -> None:
    (rig.home / ".openagents" / "programs" / "repo-map-brief.json").write_text(json.dumps(PROGRAM))


async def test_the_subject_arm_asks_once_with_the_skill_and_records_the_program_calls(rig: Rig) -> None:
    admit_program(rig)
    ran = await rig.run(REPOSITORY_PROMPT, rig.environment(programs=True, guidance=SKILL))
    assert ran.returncode == 0
    assert ran.summary == {"reply": SKILLED_REPLY, "outcome": "answered", "cost_usd": 0.001, "error": None}
    [asked] = rig.door.calls
    assert (asked.model, asked.prompt, asked.instructions) == ("stand-in/model", REPOSITORY_PROMPT, SKILL)
    assert rig.proxy.forwarded == 1
    assert not rig.proxy.auth_failed
    trajectory = ran.trajectory
    assert trajectory is not None
    assert trajectory.final_message == SKILLED_REPLY
    assert [len(trajectory.calls_to(name)) for name in ("repo_map", "repo-map-brief", "map")] == [1, 1, 1]
    assert trajectory.steps[0].message == REPOSITORY_PROMPT
    assert trajectory.document["agent"]["model_name"] == "stand-in/model"
    kept = rig.trace.read_bytes() + trajectory.document_bytes()
    assert REAL_KEY.encode() not in kept
    assert rig.proxy.token.encode() not in kept
    assert stat.S_IMODE(rig.trace.stat().st_mode) == 0o644


async def test_the_baseline_arm_admits_no_program_and_gets_the_unskilled_answer(rig: Rig) -> None:
    admit_program(rig)
    ran = await rig.run(REPOSITORY_PROMPT, rig.environment(programs=False, guidance=None))
    assert ran.summary["reply"] == UNSKILLED_REPLY
    assert ran.trajectory is not None
    assert ran.trajectory.calls == ()
    assert rig.door.calls[0].instructions == ""


async def test_a_program_is_called_only_when_the_prompt_asks_about_the_repository_or_callers(rig: Rig) -> None:
    admit_program(rig)
    greeting = await rig.run(
        "Say hello to a new contributor in one line.", rig.environment(programs=True, guidance=SKILL)
    )
    assert greeting.summary["reply"] == GREETING_REPLY
    assert greeting.trajectory is not None
    assert greeting.trajectory.calls == ()
    rig.trace.unlink()
    callers = await rig.run("Who are the callers of parse()?", rig.environment(programs=True, guidance=SKILL))
    assert callers.trajectory is not None
    assert [call.function_name for call in callers.trajectory.calls] == ["repo_map"]


async def test_a_guidance_digest_mismatch_is_refused_before_the_door_is_asked(rig: Rig) -> None:
    env = rig.environment(programs=False, guidance=SKILL, digest="sha256:" + "0" * 64)
    ran = await rig.run(REPOSITORY_PROMPT, env)
    assert ran.returncode == 1
    assert ran.summary == {"reply": None, "outcome": "failed", "cost_usd": 0.001, "error": "guidance digest mismatch"}
    assert rig.door.calls == []
    assert ran.trajectory is not None
    assert [step.source.value for step in ran.trajectory.steps] == ["user", "system"]


async def test_a_door_that_refuses_the_key_fails_the_turn_and_the_proxy_remembers() -> None:
    async for rig in make_rig("sk-a-wrong-key"):
        ran = await rig.run("hello", rig.environment(programs=False, guidance=None))
        assert ran.returncode == 1
        assert ran.summary["outcome"] == "failed"
        assert ran.summary["error"] == "door answered 401"
        assert rig.proxy.auth_failed
        assert rig.door.refused == 1


async def test_sleep_prints_the_pid_and_sleeps_until_stopped(rig: Rig) -> None:
    env = {**rig.environment(programs=False, guidance=None), "OA_EVAL_FAKE": "sleep"}
    child = await rig.start("hello", env)
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), timeout=30)
        assert json.loads(line) == {"pid": child.pid}
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(child.wait()), timeout=0.5)
    finally:
        child.kill()
        await child.wait()
    assert rig.door.calls == []


async def test_env_prints_exactly_the_environment_it_was_given(rig: Rig) -> None:
    env = {**rig.environment(programs=True, guidance=SKILL), "OA_EVAL_FAKE": "env"}
    ran = await rig.run("hello", env)
    printed = dict(line.split("=", 1) for line in ran.stdout.splitlines()[:-1])
    # Python itself may coerce a missing locale by setting LC_CTYPE (PEP 538); nothing else is added.
    printed.pop("LC_CTYPE", None)
    assert printed == env


async def test_write_leaves_the_reply_in_summary_md(rig: Rig) -> None:
    ran = await rig.run("hello", {**rig.environment(programs=False, guidance=None), "OA_EVAL_FAKE": "write"})
    assert (rig.home / "cwd" / "summary.md").read_text() == GREETING_REPLY == ran.summary["reply"]


async def test_canary_reports_whether_the_named_file_can_be_read(rig: Rig) -> None:
    canary = rig.root / "canary.txt"
    canary.write_text("operator secret canary")
    base = {**rig.environment(programs=False, guidance=None), "OA_EVAL_FAKE": "canary"}
    seen = await rig.run("hello", {**base, "OA_EVAL_CANARY": str(canary)})
    rig.trace.unlink()
    missing = await rig.run("hello", {**base, "OA_EVAL_CANARY": str(rig.root / "gone.txt")})
    assert seen.summary["reply"] == "canary: readable; home canary listed: true"
    assert missing.summary["reply"] == "canary: unreadable; home canary listed: false"
    assert seen.trajectory is not None
    assert seen.trajectory.final_message == seen.summary["reply"]


def test_p_text_without_a_trace_still_answers_in_json() -> None:
    done = subprocess.run(
        [PYTHON, str(AGENT), "-p", "hello", "--json"],
        env={"CODER_DOOR_URL": "ftp://nowhere", "CODER_DOOR_KEY": "t"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert json.loads(done.stdout.splitlines()[-1])["error"] == "the door URL is not http or https"


def test_the_agent_is_an_executable_stdlib_only_script() -> None:
    assert AGENT.read_text().startswith("#!/usr/bin/env python3\n")
    assert stat.S_IMODE(AGENT.stat().st_mode) & 0o111 == 0o111
    tree = ast.parse(AGENT.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
