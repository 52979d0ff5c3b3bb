"""The whole public path through the commands a person types, every one a real process: `eval-runner serve` (its
embedded relay and blob server, the stand-in agent and door in real sandboxes, a catalog tool it releases),
`trainer run` of that tool on the extension's own tests, `trainer publish` of that run (again, from a record
that does not remember its report: the same pointers), `verify` of the
published result (valid, crediting the trainer, its test set fetched from the embedded blob server found
beside the relay), then a second trainer's `trainer run --check RESULT_ID` (its test set and tool read from the
result), published and verified as a check of the first, and `trainer results` listing both by test set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.stand_ins.door import StandInDoor
from tests.support.publishing import publishing_env
from tests.support.runner_tools import runner_published_copy
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, command, serving, trainer_command


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


async def verify_command(*args: str) -> tuple[int, str, str]:
    """`eval-runner verify <args>` as a real process: code, out, err."""
    return await command("verify", *args)


def trainer_key(path: Path) -> tuple[Path, str]:
    secret = SecretKey.generate()
    path.write_text(secret.to_hex() + "\n")
    path.chmod(0o600)
    return path, secret.public_key().to_hex()


async def test_run_publish_verify_and_a_second_trainers_check(tmp_path: Path, temp_root: Path) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    catalog = runner_published_copy(tmp_path / "catalog" / "codebase-brief", runner)
    tool = Catalog.load([catalog]).tools[0].definition
    dana_key, dana = trainer_key(tmp_path / "dana-key")
    erin_key, erin = trainer_key(tmp_path / "erin-key")
    async with StandInDoor(DOOR_KEY) as door:
        env = publishing_env(tmp_path, temp_root, secret, catalog, door_url=door.url)
        async with serving(env) as serve:
            url = await serve.url()

            def as_trainer(key: Path) -> list[str]:
                return ["--relay", url, "--runner", runner, "--key-file", str(key), "--requests", str(tmp_path / "r")]

            code, out, err = await trainer_command("run", "--extension", str(catalog), "--json", *as_trainer(dana_key))
            assert code == 0, err
            run = json.loads(out)
            code, out, err = await trainer_command("publish", run["request"], "--json", *as_trainer(dana_key))
            assert code == 0, err
            published = json.loads(out)
            assert published["outcome"] == "completed", published
            assert published["report"] == run["report"], "the kept run record names its report"
            result = published["result"]["id"]
            assert published["suite_release"]["pubkey"] == runner, "the runner released the draft test set"

            record = tmp_path / "r" / f"{run['request']}.json"
            kept = json.loads(record.read_text())
            assert kept.pop("report") == run["report"]
            record.write_text(json.dumps(kept))  # as a record kept before runs remembered their report
            code, out, err = await trainer_command("publish", run["request"], "--json", *as_trainer(dana_key))
            assert code == 0, err
            assert "asking the runner again" in err
            again = json.loads(out)
            assert (again["result"], again["suite_release"]) == (published["result"], published["suite_release"])

            code, out, err = await verify_command(result, "--relay", url, "--json")
            assert code == 0, (out, err)
            checked = json.loads(out)
            assert (checked["valid"], checked["trainer"], checked["evaluator"]) == (True, dana, runner)
            assert checked["suite_release"]["id"] == published["suite_release"]["id"]
            assert checked["verdict"] == run["verdict"]

            code, out, err = await trainer_command("run", "--check", result, "--json", *as_trainer(erin_key))
            assert code == 0, err
            rerun = json.loads(out)
            assert rerun["outcome"] == "completed", rerun
            code, out, err = await trainer_command("publish", rerun["request"], "--json", *as_trainer(erin_key))
            assert code == 0, err
            second = json.loads(out)["result"]["id"]
            assert json.loads(out)["suite_release"] == published["suite_release"]

            code, out, err = await verify_command(second, "--relay", url, "--json")
            assert code == 0, (out, err)
            check = json.loads(out)
            assert check["trainer"] == erin
            expected = "confirms" if rerun["verdict"] == run["verdict"] else "disputes"
            assert (check["cites"]["marker"], check["cites"]["id"]) == ("check", result)
            assert (check["cites"]["relation"], check["cites"]["counts"]) == (expected, True)

            code, out, err = await verify_command(second, "--relay", url)
            assert code == 0, err
            assert "Valid: every check holds." in out
            assert f"Cites      check {result}: {expected} (counts)" in out

            subject = json.dumps(tool.to_json())
            code, out, err = await trainer_command("results", "--subject", subject, "--relay", url, "--json")
            assert code == 0, err
            listing = json.loads(out)
            assert await serve.terminate() == 0
    assert [[item["id"] for item in group["results"]] for group in listing["groups"]] == [[result, second]]
    first = listing["groups"][0]["results"][0]
    assert [(item["id"], item["relation"]) for item in first["cited_by"]] == [(second, expected)]
    assert listing["unreadable"] == 0
