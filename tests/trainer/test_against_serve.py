"""`eval-runner trainer run` against `eval-runner serve`, both real processes: the runner on its embedded relay
runs the example extension's own `evals/` (sent as a draft) in real sandboxes with the stand-in agent and
door; the trainer prints the verdict table built from the sealed report it opened, per case and arm.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.nostr import SecretKey
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, runner_env, serving, trainer_command


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


async def test_trainer_run_against_serve_prints_the_verdict_per_case_and_arm(tmp_path: Path, temp_root: Path) -> None:
    key = tmp_path / "trainer-key"
    key.write_text(SecretKey.generate().to_hex() + "\n")
    key.chmod(0o600)
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(tmp_path, temp_root, door_url=door.url, listen="127.0.0.1:0")
        async with serving(env) as serve:
            runner, url = await serve.runner(), await serve.url()
            common = ["--relay", url, "--runner", runner, "--key-file", str(key), "--requests", str(tmp_path / "r")]
            code, out, err = await trainer_command("run", "--extension", str(EXAMPLE), "--json", *common)
            assert code == 0, err
            found = json.loads(out)
            code, table, err = await trainer_command("run", "--extension", str(EXAMPLE), *common)
            assert code == 0, err
            assert await serve.terminate() == 0
    assert found["outcome"] == "completed"
    assert found["report_error"] is None
    # with the skill the stand-in agent answers the overview; without it, it can't; both greet
    assert found["headline"] == {"subject_passed": 2, "baseline_passed": 1, "total": 2}
    assert [(case["id"], case["kind"], case["with"], case["without"]) for case in found["cases"]] == [
        ("greeting", "should-not-fire", {"passed": 1, "runs": 1}, {"passed": 1, "runs": 1}),
        ("overview", "should-fire", {"passed": 1, "runs": 1}, {"passed": 0, "runs": 1}),
    ]
    # each arm's figures ride in the sealed report's meta: the stand-in door's usage, one model call a run
    figures = {(row["arm"], row["metric"]): (row["value"], row["denominator"]) for row in found["figures"]}
    assert figures[("subject", "turns")] == figures[("baseline", "turns")] == (2, 2)
    assert "1 model call," in next(
        line for line in table.splitlines() if line.startswith("With the extension per run: ")
    )
    assert f"Verdict  {found['verdict_words']}  ({found['verdict']})" in table
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    assert [[cell.strip() for cell in row[1:-1]] for row in rows] == [
        ["greeting", "should-not-fire", "1/1", "1/1", "1.00", "1.00", "+0.00"],
        ["overview", "should-fire", "1/1", "0/1", "1.00", "0.00", "+1.00"],
    ]
