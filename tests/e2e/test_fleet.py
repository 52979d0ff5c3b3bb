"""Three `serve` processes with one key on one PostgreSQL ledger and one relay: a fleet.

All three receive every request. About 200 events — runs, refusals, retransmissions of both and status
controls — are each answered exactly once, by whichever runner took the event; a retransmission is
answered from the shared record, and each run runs once on one runner.
Each runner has one suite slot; with all three busy, admitted runs wait in the database's queue. A
queued run cancelled is answered `cancelled` at once and never runs. The runner that admitted the most
queued runs is SIGKILLed in the middle of its own run: once its lease lapses a survivor answers that run
`unknown` from the record, and nobody runs it again, while the runs it had queued complete on the
survivors, each run once. A cancel, taken by any runner, stops the run on the runner that holds it.
Every runner's usage lines are rows of the database, and `usage` counts one per answered request.

Exactly once is checked after every runner has stopped (each answer was taken by the relay before its
runner exited) and a last event, published after them all, has reached the trainer: the relay delivers
to a subscription in the order it took events, so nothing the runners sent can still be on its way.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.answers import CancelResult, StatusResult
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey, sign
from eval_runner.service.ledger.claims import key_name, key_of
from eval_runner.service.requests.reply import RESULT_KIND
from eval_runner.service.usage import By, UsageArguments, usage_main
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.postgres_server import PostgresServer
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, ServeProcess, runner_env, serving
from tests.support.stalling_run import definition, stalling_run
from tests.support.stand_in_relay import local_relay
from tests.support.trainer_side import Trainer, asking_case, catalog_tool, draft, example_case, run_input

RUNNERS = 3
RUNS = 8
REFUSALS = 150
REFUSALS_AGAIN = 35
LEASE_MS = 2_000


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def write_key(path: Path) -> SecretKey:
    secret = SecretKey.generate()
    path.parent.mkdir(parents=True)
    path.write_text(secret.to_hex() + "\n")
    path.chmod(0o600)
    return secret


def greeting_run() -> dict[str, JsonValue]:
    found = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    return run_input(found, draft(catalog_tool(found), [example_case("greeting")]), runs=1)


def refused_at_once() -> dict[str, JsonValue]:
    found = definition()
    return run_input(found, draft(catalog_tool(found), [asking_case("shell", ["read", "exec"])]))


async def first_line(runners: list[ServeProcess], fragment: str) -> int:
    """The index of the runner that writes a line containing `fragment` first."""
    waits = [asyncio.ensure_future(runner.wait_for(fragment)) for runner in runners]
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return next(index for index, wait in enumerate(waits) if wait in done and wait.exception() is None)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def test_three_runners_on_one_ledger_answer_each_request_once_and_a_dead_ones_run_unknown(
    postgres: PostgresServer, tmp_path: Path, temp_root: Path
) -> None:
    phone = SecretKey.generate()
    principal = phone.public_key().to_hex()
    secret = write_key(tmp_path / "keys" / "runner-key")
    runner = secret.public_key().to_hex()
    database = postgres.fresh_schema()
    async with local_relay() as relay, StandInDoor(DOOR_KEY) as door:
        envs = [
            runner_env(
                tmp_path / f"runner-{n}",
                temp_root,
                door_url=door.url,
                relay=relay,
                key_file=tmp_path / "keys" / "runner-key",
                EVAL_RUNNER_DATABASE=database,
                EVAL_RUNNER_LEASE_MS=str(LEASE_MS),
                EVAL_RUNNER_CONCURRENCY="1",
                EVAL_RUNNER_JOBS="1",
            )
            for n in range(RUNNERS)
        ]
        async with Trainer(relay, runner, phone) as trainer:
            async with serving(envs[0]) as first, serving(envs[1]) as second, serving(envs[2]) as third:
                runners = [first, second, third]
                for process in runners:
                    await process.wait_for("ledger  shared in PostgreSQL")

                # Every runner busy with a stalling run (one suite slot each), so the runs sent next wait queued.
                stalls = [await trainer.run(stalling_run(), f"req-stall-{n}") for n in range(RUNNERS)]
                for event, _ in stalls:
                    await trainer.progress(event, lambda notes: any(n.completed >= 2 for n in notes))
                stall_keys = [key_name(key_of(runner, principal, f"req-stall-{n}", 1)) for n in range(RUNNERS)]
                holders = [await first_line(runners, f"running {key}") for key in stall_keys]
                assert sorted(holders) == list(range(RUNNERS)), "one stalling run on each runner"

                # Runs admitted by whichever runner took each event, all waiting in the database's queue.
                runs = [await trainer.run(greeting_run(), f"req-run-{n}") for n in range(RUNS)]
                for event, _ in runs:
                    await trainer.progress(event, lambda notes: any(n.status == "queued" for n in notes))
                run_keys = [key_name(key_of(runner, principal, f"req-run-{n}", 1)) for n in range(RUNS)]
                queued_by = [[key for key in run_keys if process.matching(f"queued {key}")] for process in runners]
                victim = max(range(RUNNERS), key=lambda index: len(queued_by[index]))
                assert queued_by[victim], "the runner to be killed admitted queued runs"

                # A queued run cancelled is answered at once by the runner that took the cancel, never run.
                waiting_event, waiting_body = await trainer.run(greeting_run(), "req-waiting")
                await trainer.progress(waiting_event, lambda notes: any(n.status == "queued" for n in notes))
                cancel = trainer.control_event("cancel", waiting_event, waiting_body.binding, reason="Stop")
                await trainer.publish(cancel)
                assert (await trainer.answer(cancel, CancelResult)).binding == waiting_body.binding
                assert (await trainer.result(waiting_event)).outcome == "cancelled"

                # The runner that admitted the most queued runs is killed in the middle of its stalling run.
                killed_event = stalls[holders.index(victim)][0]
                killed_key = stall_keys[holders.index(victim)]
                await runners[victim].kill()
                survivors = [process for index, process in enumerate(runners) if index != victim]

                # A cancel taken by any runner stops the run where it runs; the survivors' slots come free.
                cancels = []
                for (event, body), holder in zip(stalls, holders, strict=True):
                    if holder == victim:
                        continue
                    control = trainer.control_event("cancel", event, body.binding, reason="Stop")
                    cancels.append(control)
                    await trainer.publish(control)
                    assert (await trainer.answer(control, CancelResult)).binding == body.binding
                    stopped = await trainer.result(event)
                    assert (stopped.outcome, stopped.dispatched) == ("cancelled", True)

                # The queued runs, the dead runner's among them, complete on the survivors; refusals meanwhile.
                refusals = [await trainer.run(refused_at_once(), f"req-no-{n}", checked=False) for n in range(REFUSALS)]
                for event, _ in runs:
                    assert (await trainer.result(event)).outcome == "completed"
                for event, _ in refusals:
                    assert (await trainer.result(event)).outcome == "refused"
                again = []
                for _, body in runs[:4] + refusals[:REFUSALS_AGAIN]:
                    event = trainer.execute_event(body)
                    await trainer.publish(event)
                    again.append(event)
                statuses = []
                for event, body in runs[:3]:
                    control = trainer.control_event("status", event, body.binding)
                    await trainer.publish(control)
                    statuses.append(control)
                for event in again:
                    await trainer.result(event)
                for control in statuses:
                    assert (await trainer.answer(control, StatusResult)).outcome == "completed"

                unknown = await trainer.result(killed_event)
                assert (unknown.outcome, unknown.dispatched) == ("unknown", True)
                assert any("answered unknown" in process.text for process in survivors)
                for process in survivors:
                    assert not process.matching(f"running {killed_key}"), "a survivor ran the dead runner's run"
                for key in queued_by[victim]:
                    assert not runners[victim].matching(f"running {key}")
                    assert sum(len(process.matching(f"running {key}")) for process in survivors) == 1
                assert not any(
                    process.matching(f"running {key_name(key_of(runner, principal, 'req-waiting', 1))}")
                    for process in runners
                )
                for process in survivors:
                    assert await process.terminate() == 0

            # Every runner has stopped; a last event on the relay marks the end of what they sent.
            sentinel = sign(SecretKey.generate(), RESULT_KIND, [["p", principal]], "end", int(time.time()))
            await trainer.publish(sentinel)
            await trainer.wait(lambda: any(event.id == sentinel.id for event in trainer.received))
            every = [waiting_event, cancel, *(event for event, _ in (*stalls, *runs, *refusals))]
            for event in [*every, *again, *statuses, *cancels]:
                times = len(trainer.sent[event.id].answers) - len(trainer.sent[event.id].accepted)
                times -= len(trainer.sent[event.id].progress)
                assert times == 1, f"{event.id[:12]} answered {times} times"
            handled = sum(len(process.matching("running ")) for process in runners)
            assert handled == RUNNERS + RUNS, "each run ran once, on one runner"
            assert [reason for _, reason in trainer.unbound] == ["not signed by the runner"]

            # Every runner's usage lines are in the database: `usage` reads them all, one per answered request.
            out, err = io.StringIO(), io.StringIO()
            arguments = UsageArguments(since=None, by=By.KEY, json=True, directory=tmp_path, database=database)
            assert usage_main(arguments, stdout=out, stderr=err) == 0
            total = json.loads(out.getvalue())[-1]
            assert (total["completed"], total["refused"]) == (RUNS, REFUSALS + REFUSALS_AGAIN)
            cancelled = (RUNNERS - 1) + 1  # the survivors' stalls, and the waiting run
            assert total["jobs"] == RUNS + REFUSALS + REFUSALS_AGAIN + cancelled
