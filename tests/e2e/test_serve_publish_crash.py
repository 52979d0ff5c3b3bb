"""A publish cut off by a crash at each of its steps, finished by its retransmission after a restart, with
exactly one `3189` for the report (issue 10, runner.md §15; a publish is never answered `unknown`).

`eval-runner serve` runs as a subprocess with a fixed relay port and its embedded relay and blob server (both
keep their store under the state, so a restart sees what was published before the crash). The trainer runs a
catalog tool the runner releases itself on a draft test set, then asks to publish; the runner has
`EVAL_RUNNER_TEST_CRASH_AT` set, so it SIGKILLs itself at that step: after the draft test set's release, after
the signed `3189` is recorded (before the relay has it), after the relay took it (before it is recorded as
published), and after the result is recorded (before the answer). Restarted without the variable, the same
publish body in a new event is answered `completed` with the pointers a later publish also gets, and the relay
holds one `3189` and one release of the test set.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.outputs import PublishOutput, RunOutput
from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.requests.publish import CRASH_AT, CRASH_STEPS
from eval_runner.service.usage import read as read_usage
from eval_runner.stand_ins.door import StandInDoor
from tests.support.publishing import publish_input, publishing_env, read_results_on, stored
from tests.support.runner_tools import runner_published_copy
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, serving
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


@pytest.mark.parametrize("step", CRASH_STEPS)
async def test_a_publish_killed_at_a_step_is_finished_by_its_retransmission_with_one_result(
    step: str, tmp_path: Path, temp_root: Path
) -> None:
    secret, phone = SecretKey.generate(), SecretKey.generate()
    runner = secret.public_key().to_hex()
    catalog = runner_published_copy(tmp_path / "catalog" / "codebase-brief", runner)
    tool = Catalog.load([catalog]).tools[0].definition.to_json()
    async with StandInDoor(DOOR_KEY) as door:
        env = publishing_env(tmp_path, temp_root, secret, catalog, door_url=door.url)
        async with serving({**env, CRASH_AT: step}) as first:
            url = await first.url()
            async with Trainer(url, runner, phone) as trainer:
                event, _ = await trainer.run(
                    run_input(tool, draft(catalog_tool(tool), [example_case("greeting")])), "req-run"
                )
                ran = await trainer.result(event)
                assert isinstance(ran.output, RunOutput), ran
                publish_event, body = await trainer.run(publish_input(ran.output.report), "req-publish")
                assert await first.exit_code() == -signal.SIGKILL, first.text
                assert trainer.sent[publish_event.id].results == [], "the runner died before it answered"
        # Only the last step comes after the publish was logged (and its result recorded).
        assert len(first.matching("published ")) == (1 if step == "answering" else 0), first.text

        async with serving(env) as restarted:
            async with Trainer(url, runner, phone) as trainer:
                again = trainer.execute_event(body)
                await trainer.publish(again)
                finished = await trainer.result(again)
                assert finished.outcome == "completed", finished
                assert isinstance(finished.output, PublishOutput)
                later, _ = await trainer.run(publish_input(ran.output.report), "req-publish-later")
                assert (await trainer.result(later)).output == finished.output
            results = await read_results_on(url)
            suite_releases = [
                release
                for release in await stored(url, [RELEASE_KIND])
                if release.id == finished.output.suite_release.id
            ]
            releases = await stored(url, [RELEASE_KIND])
            assert await restarted.terminate() == 0
    assert [result.id for result in results] == [finished.output.result.id], "exactly one 3189 for the report"
    assert results[0].request is not None
    assert results[0].request.id == event.id
    assert len(suite_releases) == 1
    assert len(releases) == 2, "the tool's release and the test set's, each once"
    usage = read_usage(tmp_path / "state" / "usage").records
    completed = [record.result for record in usage if record.action == "publish" and record.outcome == "completed"]
    # Two lines: the later publish's, and the cut-off one's (kept before the crash when its result was recorded,
    # else by the retransmission that finished it; a retransmission answered from the ledger keeps none).
    assert completed == [finished.output.result.id] * 2
