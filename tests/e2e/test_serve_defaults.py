"""After an adoption the next run is marginal (runner.md §21.5, the adoption half), through real processes:
`eval-runner serve` over its embedded relay with a catalog tool it publishes itself, a test operator's key as
the defaults root and a documents directory; the stand-in agent and door in real sandboxes.

Before the adoption the runner says it has no defaults, and a run (two runs per arm) reads Better with
the report naming no defaults. The operator then adopts the tool: an admission and a `coder-defaults`
manifest in the documents directory, the `3184` on the relay. The next run is marginal: the baseline holds
the tool too, so it passes as many tests as the subject arm and the verdict is no longer Better; the
report's `meta.ext_eval.defaults` names the release, and both arms' locks changed. The runner says the new
release once, and the run line says it is marginal. No event the trainer was sent holds the door key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.report import Report
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases.defaults import NONE_LINE
from eval_runner.stand_ins.door import StandInDoor
from tests.support.coder_defaults import adoption
from tests.support.runner_tools import OURS, key_file, runner_published_copy
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, runner_env, serving
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


async def finished_report(trainer: Trainer, value: JsonValue, request_id: str) -> tuple[RunOutput, Report]:
    event, _ = await trainer.run(value, request_id)
    result = await trainer.result(event)
    assert result.outcome == "completed", result
    output = result.output
    assert isinstance(output, RunOutput)
    _, envelope = await trainer.open_sealed(output.sealed)
    assert envelope.inline is not None
    return output, Report.parse_bytes(canonical(envelope.inline))


async def test_after_an_adoption_the_next_run_is_marginal(tmp_path: Path, temp_root: Path) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    tool_dir = runner_published_copy(tmp_path / "tool", runner)
    definition = Catalog.load([tool_dir]).tools[0].definition.to_json()
    operator = SecretKey.generate()
    documents = tmp_path / "documents"
    documents.mkdir()
    phone = SecretKey.generate()
    value = run_input(
        definition, draft(catalog_tool(definition), [example_case("greeting"), example_case("overview")]), runs=2
    )
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path,
            temp_root,
            door_url=door.url,
            listen="127.0.0.1:0",
            key_file=key_file(tmp_path / "keys" / "runner-key", secret),
            EVAL_RUNNER_CATALOG=str(tool_dir),
            EVAL_RUNNER_DEFAULTS_ROOT=operator.public_key().to_hex(),
            EVAL_RUNNER_DEFAULTS_DOCS=str(documents),
        )
        async with serving(env) as process:
            url = await process.url()
            released = (await process.wait_for(f"tool    {OURS} released as ")).split()[-1]
            await process.wait_for(NONE_LINE)
            async with Trainer(url, runner, phone) as trainer:
                before, first = await finished_report(trainer, value, "req-before-adoption")
                assert (before.headline.subject_passed, before.headline.baseline_passed) == (2, 1)
                assert before.verdict == "pass"
                assert first.ext_eval.defaults is None

                adopted = {**definition, "event": {"id": released, "pubkey": runner, "kind": 3184}}
                made = adoption(operator, adopted, now=int(time.time()) - 1)
                for data in made.documents:
                    (documents / f"{len(list(documents.iterdir()))}.json").write_bytes(data)
                await RelayClient(url, operator, challenge_wait=0.05).publish(made.release)

                after, second = await finished_report(trainer, value, "req-after-adoption")
                sent = [json.dumps(event.to_json()) for event in trainer.received]
            marginal_line = await process.wait_for(", marginal over the defaults")
            adopted_line = f"defaults release {made.release.id[:12]} (version 1) admits {OURS}"
            await process.wait_for(adopted_line)
            assert await process.terminate() == 0
    assert after.headline.subject_passed == after.headline.baseline_passed == 2
    assert after.verdict != "pass"
    assert second.ext_eval.defaults is not None
    assert second.ext_eval.defaults.id == made.release.id
    assert second.subject.lock.digest != first.subject.lock.digest
    assert first.baseline is not None
    assert second.baseline is not None
    assert second.baseline.lock.digest != first.baseline.lock.digest
    assert "2 tests, 2 runs per arm, marginal over the defaults" in marginal_line
    assert process.matching("defaults release") == [adopted_line], "the release is said once"
    assert [line for line in process.lines if line.startswith("defaults ")].count(NONE_LINE) == 1
    assert not [event for event in sent if DOOR_KEY in event]
