"""A fleet on one PostgreSQL ledger beside one SQLite runner, in one run: `uv run python bench/fleet.py`.

Figures and their targets (issue 12): for one SQLite runner, then 1, 2 and 3 runners sharing one PostgreSQL
ledger — requests answered per second, time to `accepted` p50/p95, and the database's share of the CPU
the runners and the database spent (per request, the same share). Targets: accepted p50 through
PostgreSQL ≤ 1.5× the SQLite runner's; three runners answer ≥ 2.5× what one answers (agent-bound load).

Set-up. Real `eval-runner serve` processes (`tests.support.serve_process`), each `EVAL_RUNNER_JOBS=1` and
`EVAL_RUNNER_CONCURRENCY=2` (one suite at a time, both arms at once: each runner is bound by its own slots,
not by this 2-core machine's cores), one key, one nostr-sdk LocalRelay, the stand-in door, and a throwaway
PostgreSQL (`tests.support.postgres_server`, a fresh schema per configuration). The agent is a STAND-IN,
not a real agent: the stand-in coder with one second of sleep before its turn (written to a temp file by
this script), so a request (the greeting case, one run per arm) is two 1 s turns run side by side. A load
is `--requests` requests per runner published back to back by one trainer, at most 16 in flight (a key's
claim slots are the fleet's, as they are one runner's); accepted is from publishing to the
`27020 accepted`; answered/s is requests over the time from the first publish to the last result. CPU
is /proc's user+system time (children included) of the serve processes and of the PostgreSQL server.
Asserts nothing; figures are never timings in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval_runner import stand_ins
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.claims import CAPACITY
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.postgres_server import PostgresServer, postgres_server
from tests.support.serve_process import DOOR_KEY, ServeProcess, runner_env, serving
from tests.support.stand_in_relay import local_relay
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input

T = TypeVar("T")
TICKS = os.sysconf("SC_CLK_TCK")


def second_agent(directory: Path) -> Path:
    """The stand-in coder with one second of sleep before its turn (a STAND-IN, not a real agent)."""
    source = stand_ins.AGENT.read_text(encoding="utf-8")
    marker = '    mode = os.environ.get("OA_EVAL_FAKE", "")\n'
    assert marker in source, "the stand-in agent changed; update bench/fleet.py"
    path = directory / "stand_in_second_agent.py"
    path.write_text(source.replace(marker, "    time.sleep(1)\n" + marker, 1), encoding="utf-8")
    path.chmod(0o755)
    return path


def greeting_run() -> dict[str, JsonValue]:
    found = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    return run_input(found, draft(catalog_tool(found), [example_case("greeting")]), runs=1)


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid`, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / TICKS


def database_cpu(server: PostgresServer | None) -> float:
    """The PostgreSQL server's CPU: the postmaster (with its reaped backends) and its live children."""
    if server is None:
        return 0.0
    pid_file = server.socket_dir / "data" / "postmaster.pid"
    try:
        master = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = cpu_seconds(master)
    for child in Path(f"/proc/{master}/task/{master}/children").read_text().split():
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


async def patiently(trainer: Trainer, done: Callable[[], bool]) -> None:
    """A trainer's wait without its 30 s failure bound: a queue of runs may take longer (10 min at most)."""
    async with asyncio.timeout(float(os.environ.get("BENCH_BOUND", "600"))):
        while True:
            try:
                return await trainer.wait(done)
            except TimeoutError:
                continue


async def load(
    name: str,
    envs: list[dict[str, str]],
    relay: str,
    runner: str,
    requests: int,
    server: PostgresServer | None,
) -> dict[str, float | str]:
    async with Trainer(relay, runner, SecretKey.generate()) as trainer:
        processes: list[ServeProcess] = []
        contexts = [serving(env) for env in envs]
        try:
            for context in contexts:
                processes.append(await context.__aenter__())
            await asyncio.sleep(0.5)  # settle after start (a bench pause, not synchronisation)
            runners_cpu = sum(cpu_seconds(process.process.pid) for process in processes)
            db_cpu = database_cpu(server)
            accepted: list[float] = []

            in_flight = asyncio.Semaphore(CAPACITY)

            async def one(n: int) -> None:
                async with in_flight:  # a key's 16 claim slots are the fleet's, as they are one runner's
                    sent = time.monotonic()
                    event, _ = await trainer.run(greeting_run(), f"{name}-{n}")
                    await patiently(trainer, lambda: bool(trainer.sent[event.id].answers))
                    accepted.append(time.monotonic() - sent)
                    await patiently(trainer, lambda: bool(trainer.sent[event.id].results))
                    assert trainer.sent[event.id].accepted, trainer.sent[event.id].results
                    assert trainer.sent[event.id].results[0].outcome == "completed", trainer.sent[event.id].results

            start = time.monotonic()
            try:
                await asyncio.gather(*(one(n) for n in range(requests)))
            except TimeoutError:
                for process in processes:
                    print(process.text, file=sys.stderr)
                for sent in trainer.sent.values():
                    print(sent.binding.request, [type(b.answer).__name__ for b in sent.answers], file=sys.stderr)
                raise
            elapsed = time.monotonic() - start
            runners_cpu = sum(cpu_seconds(process.process.pid) for process in processes) - runners_cpu
            db_cpu = database_cpu(server) - db_cpu
        finally:
            for context in reversed(contexts):
                await context.__aexit__(None, None, None)
    cuts = statistics.quantiles(accepted, n=20)
    return {
        "setup": name,
        "answered/s": requests / elapsed,
        "accepted p50 ms": statistics.median(accepted) * 1000,
        "accepted p95 ms": cuts[18] * 1000,
        "db CPU share": db_cpu / (db_cpu + runners_cpu) if db_cpu + runners_cpu else 0.0,
    }


async def bench(requests: int) -> list[dict[str, float | str]]:
    os.environ.setdefault("BENCH", "1")
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as temp, postgres_server() as server:
        base = Path(temp)
        base.chmod(0o755)  # the sandbox's uid 65534 reads the agent and searches the temp root under it
        agent = second_agent(base)
        temp_root = base / "tmp"
        temp_root.mkdir()
        secret = SecretKey.generate()
        key_file = base / "keys" / "runner-key"
        key_file.parent.mkdir()
        key_file.write_text(secret.to_hex() + "\n")
        key_file.chmod(0o600)
        runner = secret.public_key().to_hex()
        async with local_relay() as relay, StandInDoor(DOOR_KEY) as door:

            def env(name: str, database: str | None) -> dict[str, str]:
                extra = {"EVAL_RUNNER_JOBS": "1", "EVAL_RUNNER_CONCURRENCY": "2", "EVAL_RUNNER_CODER": str(agent)}
                if database is not None:
                    extra["EVAL_RUNNER_DATABASE"] = database
                return runner_env(base / name, temp_root, door_url=door.url, relay=relay, key_file=key_file, **extra)

            rows.append(await load("sqlite-1", [env("sqlite", None)], relay, runner, requests, None))
            for count in (1, 2, 3):
                database = server.fresh_schema()
                envs = [env(f"pg{count}-{n}", database) for n in range(count)]
                rows.append(await load(f"postgresql-{count}", envs, relay, runner, requests * count, server))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5, help="requests per runner in each load")
    args = parser.parse_args()
    rows = asyncio.run(bench(args.requests))
    print(f"{'setup':<14} {'answered/s':>10} {'accepted p50':>13} {'accepted p95':>13} {'db CPU share':>13}")
    for row in rows:
        print(
            f"{row['setup']:<14} {row['answered/s']:>10.2f} {row['accepted p50 ms']:>10.1f} ms "
            f"{row['accepted p95 ms']:>10.1f} ms {row['db CPU share']:>12.1%}"
        )
    sqlite, one, three = rows[0], rows[1], rows[3]
    ratio = float(one["accepted p50 ms"]) / float(sqlite["accepted p50 ms"])
    scale = float(three["answered/s"]) / float(one["answered/s"])
    print(f"accepted p50, PostgreSQL (1 runner) / SQLite: {ratio:.2f}x (target <= 1.5x)")
    print(f"answered/s, 3 runners / 1 runner: {scale:.2f}x (target >= 2.5x)")


if __name__ == "__main__":
    main()
