"""A cancel of a sleeping run through the whole real path: `eval-runner serve` as a process, the stand-in
agent asleep in its sandbox, the trainer's signed cancel control over the relay (runner.md §21.1 item 4).
The control is answered `cancel_result`, the execute event gets the `cancelled` result, and the sleeping
agent's sandbox is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.answers import CancelResult
from eval_runner.nostr import SecretKey
from eval_runner.stand_ins.door import StandInDoor
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, free_port, runner_env, serving
from tests.support.stalling_run import stalled
from tests.support.trainer_side import Trainer


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


async def test_a_cancel_stops_a_sleeping_run_and_the_request_gets_cancelled(tmp_path: Path, temp_root: Path) -> None:
    phone = SecretKey.generate()
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path, temp_root, door_url=door.url, listen=f"127.0.0.1:{free_port()}", EVAL_RUNNER_CONCURRENCY="1"
        )
        async with serving(env) as runner_process:
            runner, url = await runner_process.runner(), await runner_process.url()
            async with Trainer(url, runner, phone) as trainer:
                event, body = await stalled(trainer)  # the greeting ran; the sleeping case is in its sandbox
                control = trainer.control_event("cancel", event, body.binding, reason="the person tapped Stop")
                await trainer.publish(control)
                acknowledged = await trainer.answer(control, CancelResult)  # parsing it checks acknowledged: true
                assert (acknowledged.dispatched, acknowledged.binding) == (True, body.binding)
                result = await trainer.result(event)
                assert (result.outcome, result.dispatched, result.output) == ("cancelled", True, None)
                assert result.message == "the requester stopped the run"
            await runner_process.wait_for("cancelling ")
        assert list(temp_root.glob("oa-eval-*")) == [], "the sleeping run's sandbox directory is gone"
