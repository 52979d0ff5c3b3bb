"""`eval-runner verify` as a real subprocess over a real relay (nostr-sdk's LocalRelay) and the real embedded blob
server: a good result exits 0 with its table and `--json`; a spoiled one exits 1 naming the failed check; a
wrong command line exits 64; `--rerun` runs the test set here (the released tool, the stand-in agent and door,
the real sandbox) and shows both verdicts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from eval_runner.cli.verify import PRODUCTION_BUCKET, blob_bases
from eval_runner.contracts.refs import EventRef
from tests.support.published_results import (
    RUNNER,
    TRAINER,
    Published,
    hosted_report,
    result_event,
    signed_request,
    spoiled,
)
from tests.support.stand_in_relay import BOUND

COMMAND = (sys.executable, "-m", "eval_runner.cli", "verify")
#: A subprocess starts Python and reads the relay and the store; a rerun runs a suite in the sandbox.
WITHIN = 6 * BOUND


async def verify(world: Published, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    environ = {
        name: value for name, value in os.environ.items() if name not in ("EVAL_RUNNER_RELAY", "EVAL_RUNNER_CODER")
    }
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        *args,
        "--relay",
        world.relay_url,
        "--blossom",
        world.server.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(process.communicate(), WITHIN)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_a_good_result_exits_0_with_its_checks_and_json(world: Published) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request)
    await world.relay.publish(event)
    code, out, err = await verify(world, event.id)
    assert code == 0, err
    assert "Valid: every check holds." in out
    assert f"Trainer    {TRAINER.public_key().to_hex()}" in out
    assert "suite digest" in out
    code, out, _ = await verify(world, event.id, "--json")
    assert code == 0
    found = json.loads(out)
    assert (found["valid"], found["failed"], found["trainer"]) == (True, None, TRAINER.public_key().to_hex())
    assert [check["passed"] for check in found["checks"]] == [True] * 7
    assert found["suite_release"]["id"] == world.suite_pointer.id


async def test_a_spoiled_result_exits_1_naming_the_failed_check(world: Published) -> None:
    request = signed_request(TRAINER)
    good = result_event(hosted_report(world, request), request)
    bad = spoiled(good, tags=lambda tags: [["x", "ab" * 32] if tag[0] == "x" else tag for tag in tags])
    await world.relay.publish(bad)
    code, out, _ = await verify(world, bad.id)
    assert code == 1
    assert "Not valid: reader checks failed." in out
    code, out, _ = await verify(world, bad.id, "--json")
    assert code == 1
    failed = json.loads(out)["failed"]
    assert failed["check"] == "reader checks"
    assert failed["detail"].startswith("x tag: ")


async def test_a_wrong_command_line_exits_64(world: Published) -> None:
    code, _, err = await verify(world, "ab" * 32, "--extension", "somewhere")
    assert code == 64
    assert "--rerun" in err
    assert err.startswith("usage: eval-runner verify ")
    code, out, err = await verify(world, "not-hex", "--json")
    assert code == 64
    assert out == ""
    assert err.startswith("usage: eval-runner verify ")
    assert "64-hex" in err


def test_the_blob_stores_follow_the_relay() -> None:
    assert blob_bases("ws://127.0.0.1:7447", None) == ["http://127.0.0.1:7448", "http://127.0.0.1:7447"]
    assert blob_bases("wss://relay.openagents.com", None) == ["https://relay.openagents.com", PRODUCTION_BUCKET]
    assert blob_bases("wss://elsewhere.example", ["https://blobs.example"]) == ["https://blobs.example"]


async def test_rerun_runs_the_test_set_here_and_shows_both_verdicts(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request)
    await world.relay.publish(event)
    code, out, err = await verify(world, event.id, "--json", "--rerun", "--out", str(tmp_path / "out"))
    assert out, err
    found = json.loads(out)
    assert found["rerun"]["error"] is None, err
    assert code == 0
    assert found["rerun"]["verdict"] in ("pass", "fail", "inconclusive")
    assert found["rerun"]["headline"]["total"] == 2
    assert set(found["rerun"]["stand_ins"]) == {"agent", "door"}
    assert Path(found["rerun"]["report"]).is_file()


async def test_a_rerun_whose_tool_release_is_missing_still_shows_the_checks(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    gone = EventRef(id="cd" * 32, pubkey=RUNNER.public_key().to_hex(), kind=3184)
    event = result_event(hosted_report(world, request, tool=gone), request)
    await world.relay.publish(event)
    code, out, err = await verify(world, event.id, "--rerun", "--out", str(tmp_path / "out"))
    assert code == 1, err
    assert f"Result {event.id}" in out, "the table of checks comes first"
    assert "reader checks" in out
    assert f"Rerun      did not run: the release {gone.id} by {gone.pubkey} isn't on the relay" in out
    assert out.index("reader checks") < out.index("Rerun      did not run")
