"""A runner killed mid-run, restarted over the same state: a retransmission is answered `unknown` and the
run is never run again (runner.md §6, §21.1 item 5), all through real processes; and a stop (SIGTERM)
lets the run in flight finish, unless a second signal cuts it off.

`eval-runner serve` runs as a subprocess with its embedded relay on a fixed loopback port, the stand-in
agent in real sandboxes and the stand-in door. The trainer's run has two cases, one run per arm, run one at
a time: the greeting (which asks the door) and a case whose agent sleeps until stopped. Once the phone has
seen two runs finished of four, the runner is SIGKILLed with the sleeping run in its sandbox. The restarted
runner must answer the same body, sent again in a new event, `unknown`, and start nothing: no `running`
line, no call at the door, no new file under its jobs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.run.leftovers import bridges
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.claims import key_name, key_of
from eval_runner.service.serve import STOPPED, STOPPING
from eval_runner.stand_ins.door import StandInDoor
from tests.support.sandboxed_runs import BOUND_SECONDS, ends_within, fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, ServeProcess, free_port, runner_env, serving
from tests.support.stalling_run import definition, stalled, stalling_run
from tests.support.trainer_side import Trainer, asking_case, catalog_tool, draft, example_case, run_input


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def refused_at_once() -> dict[str, JsonValue]:
    found = definition()
    return run_input(found, draft(catalog_tool(found), [asking_case("shell", ["read", "exec"])]))


def files_under(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


async def test_a_run_killed_mid_way_is_answered_unknown_after_a_restart_and_never_run_again(
    tmp_path: Path, temp_root: Path
) -> None:
    phone = SecretKey.generate()
    state = tmp_path / "state"
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path, temp_root, door_url=door.url, listen=f"127.0.0.1:{free_port()}", EVAL_RUNNER_CONCURRENCY="1"
        )
        async with serving(env) as first:
            runner, url = await first.runner(), await first.url()
            async with Trainer(url, runner, phone) as trainer:
                event, body = await trainer.run(stalling_run(), "req-killed")
                notes = await trainer.progress(
                    event, lambda notes: any(n.status == "running" and n.completed >= 2 for n in notes)
                )
                assert notes[-1].planned == 4
                key = key_of(runner, phone.public_key().to_hex(), "req-killed", 1)
                await first.wait_for(f"running {key_name(key)} for {phone.public_key().to_hex()[:12]}: 2 tests")
                await door.answered(3)  # the stalling turn asked the door: it is in its sandbox
                sandboxes = [pid for pid, mark in bridges() if mark.startswith(f"{first.process.pid}:")]
                assert len(sandboxes) == 1, "the stalling run is in its sandbox"
                await first.kill()
                assert trainer.sent[event.id].results == [], "the run was cut off before its result"
                # The sandbox ended with its runner: a sandbox outliving a killed runner was seen (issue 7).
                assert ends_within(sandboxes[0], BOUND_SECONDS), "the sandbox outlived its runner"
        door_calls = len(door.calls)
        assert door_calls >= 2, "the greeting's two runs asked the door"
        jobs_before = files_under(state / "jobs")
        assert f"{key_name(key)}/results" in jobs_before

        async with serving(env) as restarted:
            assert await restarted.runner() == runner
            async with Trainer(url, runner, phone) as trainer:
                again = trainer.execute_event(body)
                await trainer.publish(again)
                result = await trainer.result(again)
                assert (result.outcome, result.dispatched, result.output) == ("unknown", True, None)
                assert not result.has_code
                assert trainer.sent[again.id].accepted == []
                assert trainer.sent[again.id].progress == []
                # A later request answered proves the runner went on; the interrupted one never started.
                later, _ = await trainer.run(refused_at_once(), "req-later")
                assert (await trainer.result(later)).code == "not_admitted"
            await restarted.wait_for(f"refused {later.id[:12]}")
            assert restarted.matching("running ") == [], restarted.text
        assert len(door.calls) == door_calls, "nothing asked the door again"
        assert files_under(state / "jobs") == jobs_before, "no run directory was made again"


async def test_a_restart_keeps_the_embedded_relays_stored_events(tmp_path: Path, temp_root: Path) -> None:
    """The embedded relay persists under the state: a sealed report stored before a crash is still there."""
    phone = SecretKey.generate()
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(tmp_path, temp_root, door_url=door.url, listen=f"127.0.0.1:{free_port()}")
        async with serving(env) as first:
            runner, url = await first.runner(), await first.url()
            found = definition()
            async with Trainer(url, runner, phone) as trainer:
                event, _ = await trainer.run(
                    run_input(found, draft(catalog_tool(found), [example_case("greeting")])), "req-sealed"
                )
                result = await trainer.result(event)
                assert result.outcome == "completed"
                assert isinstance(result.output, RunOutput)
                sealed = result.output.sealed
            await first.kill()
        process = await ServeProcess.start(env)
        try:
            await process.wait_for("subscribed")
            async with Trainer(url, runner, phone) as trainer:
                _, envelope = await trainer.open_sealed(sealed)
                assert envelope is not None
        finally:
            await process.close()


async def test_a_stop_lets_the_run_in_flight_finish_and_answer(tmp_path: Path, temp_root: Path) -> None:
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(tmp_path, temp_root, door_url=door.url, listen="127.0.0.1:0", EVAL_RUNNER_CONCURRENCY="2")
        async with serving(env) as process:
            runner, url = await process.runner(), await process.url()
            async with Trainer(url, runner) as trainer:
                # Both arms of the stall begin once the greeting's are done, and end at its 3 s deadline.
                event, _ = await stalled(trainer, deadline=3)
                process.process.send_signal(signal.SIGTERM)
                await process.wait_for(STOPPING)
                assert trainer.sent[event.id].results == [], "the run was still in flight when the stop began"
                result = await trainer.result(event)
                assert result.outcome == "completed"
            assert await process.exit_code() == 0
    order = [process.lines.index(process.matching(fragment)[0]) for fragment in (STOPPING, "finished ", STOPPED)]
    assert order == sorted(order), process.text
    assert process.lines[-1] == STOPPED


async def test_a_second_signal_cuts_the_run_off_and_a_restart_answers_it_unknown(
    tmp_path: Path, temp_root: Path
) -> None:
    phone = SecretKey.generate()
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path, temp_root, door_url=door.url, listen=f"127.0.0.1:{free_port()}", EVAL_RUNNER_CONCURRENCY="1"
        )
        async with serving(env) as process:
            runner, url = await process.runner(), await process.url()
            async with Trainer(url, runner, phone) as trainer:
                event, body = await stalled(trainer)
                process.process.send_signal(signal.SIGTERM)
                await process.wait_for(STOPPING)
                process.process.send_signal(signal.SIGTERM)
                assert await process.exit_code() == 0
                assert trainer.sent[event.id].results == []
        assert process.lines[-1] == STOPPED
        assert process.matching("finished ") == []
        async with serving(env) as restarted, Trainer(url, runner, phone) as trainer:
            again = trainer.execute_event(body)
            await trainer.publish(again)
            assert (await trainer.result(again)).outcome == "unknown"
            assert restarted.matching("running ") == []
