"""`eval-runner serve` as a real subprocess, and the environment a test runs it in.

`ServeProcess` starts `python -m eval_runner.cli serve` (or `check`) with an environment built from
scratch (no variable of the test's own leaks in), reads its stderr line by line as it comes, and lets a
test await a line (`wait_for`), kill it (SIGKILL, as a crash), stop it (SIGTERM) and read its exit code.
Every wait is bounded by `BOUND`, as a failure bound only: nothing here sleeps to synchronise.

`runner_env` is the configuration of a runner over `examples/codebase-brief` with the stand-in agent, its
state and temp root under the test's directories, and the door and relay the test gives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from eval_runner import stand_ins
from tests.support.paths import EXAMPLE

AGENT: Final = stand_ins.AGENT
DOOR_KEY: Final = "door-key-e2e-never-kept-5d1f0b7c93a2"
DOOR_KEY_ENV: Final = "STAND_IN_DOOR_KEY"
MODEL: Final = "stand-in"
BOUND: Final = 30.0
SUBSCRIBED: Final = "subscribed; requests arrive live from here"


#: Below Linux's ephemeral range (32768–60999), so no client socket of this machine takes the port between
#: the choice and the bind, nor while a killed `serve` is restarted on it.
PORTS = range(20_000, 32_000, 2)


def free_port() -> int:
    """A loopback port nothing listens on now, and its next one (the embedded blob server's default): the
    relay binds the first next, the blob server the second."""
    for port in random.sample(PORTS, len(PORTS)):
        with socket.socket() as first, socket.socket() as second:
            try:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of loopback ports below the ephemeral range")


def runner_env(
    base: Path,
    temp_root: Path,
    *,
    door_url: str,
    listen: str | None = None,
    relay: str | None = None,
    key_file: Path | None = None,
    **extra: str,
) -> dict[str, str]:
    """A runner's environment: state `base/state`, home `base/home`, the given temp root, door and relay."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(base / "home"),
        "LANG": "C.UTF-8",
        "EVAL_RUNNER_CATALOG": str(EXAMPLE),
        "EVAL_RUNNER_CODER": str(AGENT),
        "EVAL_RUNNER_STATE": str(base / "state"),
        "EVAL_RUNNER_TMP": str(temp_root),
        "CODER_DOOR_URL": door_url,
        "CODER_DOOR_KEY": DOOR_KEY,
        "CODER_MODEL": MODEL,
        "EVAL_RUNNER_CONCURRENCY": "2",
    }
    if listen is not None:
        env["EVAL_RUNNER_LISTEN"] = listen
    if relay is not None:
        env["EVAL_RUNNER_RELAY"] = relay
    if key_file is not None:
        env["EVAL_RUNNER_KEY_FILE"] = str(key_file)
    env.update(extra)
    return env


class ServeProcess:
    """One `eval-runner <command>` subprocess and the lines it has written to stderr so far."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._grew = asyncio.Condition()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, env: dict[str, str], command: str = "serve") -> ServeProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "eval_runner.cli",
            command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    def matching(self, fragment: str) -> list[str]:
        return [line for line in self.lines if fragment in line]

    async def wait_for(self, fragment: str, count: int = 1) -> str:
        """The `count`-th stderr line containing `fragment`; fails if the process ends first."""
        async with asyncio.timeout(BOUND), self._grew:
            await self._grew.wait_for(lambda: len(self.matching(fragment)) >= count or self._reader.done())
        found = self.matching(fragment)
        assert len(found) >= count, f"serve ended without {fragment!r}:\n{self.text}"
        return found[count - 1]

    async def runner(self) -> str:
        """The runner's public key, from its `runner` startup line."""
        line = await self.wait_for("runner  ")
        return line.split()[1]

    async def url(self) -> str:
        """The relay URL of the `relay` startup line."""
        line = await self.wait_for("relay   ")
        return line.split()[-1]

    async def kill(self) -> None:
        """SIGKILL: the process dies where it is, as in a crash."""
        self.process.kill()
        await self.exit_code()

    async def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return await self.exit_code()

    async def exit_code(self) -> int:
        async with asyncio.timeout(BOUND):
            code = await self.process.wait()
            await self._reader
        return code

    async def stdout(self) -> str:
        assert self.process.stdout is not None
        async with asyncio.timeout(BOUND):
            return (await self.process.stdout.read()).decode()

    async def _read(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            async with self._grew:
                self.lines.append(line.decode("utf-8", "replace").rstrip("\n"))
                self._grew.notify_all()
        async with self._grew:
            self._grew.notify_all()

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.exit_code()


@asynccontextmanager
async def serving(env: dict[str, str], *, subscribed: bool = True) -> AsyncIterator[ServeProcess]:
    """`eval-runner serve`, killed at the end if still running; waits for its subscription unless told not to."""
    process = await ServeProcess.start(env)
    try:
        if subscribed:
            await process.wait_for(SUBSCRIBED)
        yield process
    finally:
        await process.close()


async def trainer_command(*args: str) -> tuple[int, str, str]:
    """`eval-runner trainer <args>` as a real process (no runner variables of this environment): code, out, err."""
    return await command("trainer", *args)


async def command(*args: str) -> tuple[int, str, str]:
    """`eval-runner <args>` as a real process (no runner variables of this environment): code, out, err."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("EVAL_RUNNER_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eval_runner.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 4 * BOUND)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
