"""`eval-runner trainer` as a real subprocess against a runner served in this process (the real pipeline over
nostr-sdk's LocalRelay with the stand-in suite runner): exit codes, the `--json` object, the verdict
table, the kept request records that status, cancel and retransmission use, usage errors (exit 64), and a
relay and runner that do not go together refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from eval_runner.contracts.hosted import RUNNER
from eval_runner.nostr import Filter, RelayEvent, SecretKey
from eval_runner.service.relay.connection import RelayConnection, query_on
from tests.support.hosted_service import Service, hosted_service
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import BOUND, local_relay

COMMAND = (sys.executable, "-m", "eval_runner.cli", "trainer")
#: A subprocess starts Python and opens two relay connections; this bounds it as a failure bound only.
WITHIN = 6 * BOUND
FIXTURES_WARNING = (
    "overview: its fixtures (6 files) stay behind; a draft carries only prompt.md and graders/*.md, "
    "so the run starts in an empty directory"
)


def environment() -> dict[str, str]:
    """This process's environment without any trainer or runner settings, so only the flags count."""
    skip = {"EVAL_RUNNER_RELAY", "EVAL_RUNNER_PUBKEY", "EVAL_RUNNER_TRAINER_DIR", "EVAL_RUNNER_STATE"}
    return {name: value for name, value in os.environ.items() if name not in skip | {"EVAL_RUNNER_KEY_FILE"}}


async def trainer(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *COMMAND, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=environment()
    )
    out, err = await asyncio.wait_for(process.communicate(), WITHIN)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def key_file(tmp_path: Path, mode: int = 0o600) -> tuple[Path, SecretKey]:
    secret = SecretKey.generate()
    path = tmp_path / "trainer-key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secret.to_hex() + "\n")
    path.chmod(mode)
    return path, secret


def settings(url: str, runner: str, key: Path, requests: Path) -> list[str]:
    return ["--relay", url, "--runner", runner, "--key-file", str(key), "--requests", str(requests)]


def service_settings(service: Service, tmp_path: Path) -> tuple[list[str], SecretKey, Path]:
    key, secret = key_file(tmp_path)
    requests = tmp_path / "requests"
    return settings(service.url, service.runner, key, requests), secret, requests


def one_json(text: str) -> dict[str, Any]:
    [line] = text.splitlines()
    found = json.loads(line)
    assert isinstance(found, dict)
    return found


async def test_a_run_prints_one_json_object_and_its_record_serves_status_and_retransmission(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service:
        common, secret, requests = service_settings(service, tmp_path)
        code, out, err = await trainer("run", "--extension", str(EXAMPLE), "--json", *common)
        assert code == 0, err
        found = one_json(out)
        assert (found["outcome"], found["silence"], found["code"], found["message"]) == ("completed", None, None, None)
        assert (found["verdict"], found["verdict_words"]) == ("pass", "Better")
        assert found["headline"] == {"subject_passed": 2, "baseline_passed": 1, "total": 2}
        assert found["notes"] == ["Faster: 12.0 s against 30.0 s per run"]
        result = found["result"]
        assert result["output"]["report"] == found["report"]
        assert result["output"]["sealed"]["id"] == found["sealed"]
        assert found["report_error"] is None
        # the stand-in's report has no per-case runs_passed measurements: rows name the cases, arms unknown
        assert found["cases"] == [
            {"id": "map-repo", "kind": "should-fire", "with": None, "without": None},
            {"id": "say-hello", "kind": "should-not-fire", "with": None, "without": None},
        ]
        assert found["figures"] == []  # the stand-in's report carries none
        assert [note["seq"] for note in found["progress"]] == list(range(6))
        assert found["progress"][-1] == {"seq": 5, "status": "running", "completed": 4, "planned": 4}
        assert found["accepted"]["type"] == "accepted"
        assert (found["runner"], found["relay"], found["conflicts"]) == (service.runner, service.url, [])
        assert found["warnings"] == [FIXTURES_WARNING]
        assert f"warning: {FIXTURES_WARNING}" in err
        assert found["events"] == [found["event"]]
        record = json.loads((requests / f"{found['request']}.json").read_text())
        assert record["accepted_event"] == found["event"]
        assert record["body"]["request"] == found["request"]
        assert stat.S_IMODE((requests / f"{found['request']}.json").stat().st_mode) == 0o600
        assert secret.to_hex() not in json.dumps(record)

        code, out, err = await trainer("status", found["request"], "--json", *common)
        assert code == 0, err
        status = one_json(out)
        assert status["answer"]["type"] == "status_result"
        assert (status["answer"]["state"], status["answer"]["outcome"]) == ("terminal", "completed")
        code, out, _ = await trainer("status", found["event"], *common)
        assert code == 0
        assert out.strip() == f"request {found['request']}: terminal, outcome completed"

        code, out, err = await trainer("run", "--retransmit", found["request"], "--json", *common)
        assert code == 0, err
        again = one_json(out)
        assert again["result"] == found["result"]
        assert (again["request"], again["event"]) == (found["request"], found["event"])
        assert len(again["events"]) == 2
        assert again["progress"] == [], "answered from the ledger, not run again"
        assert service.suite.runs == 1


async def test_a_run_shows_the_verdict_table_and_plain_progress_lines(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service:
        common, _, _ = service_settings(service, tmp_path)
        code, out, err = await trainer("run", "--extension", str(EXAMPLE), *common)
    assert code == 0, err
    assert "Verdict  Better  (pass)" in out
    assert "Passes 2 of 2 tests with the extension, 1 of 2 without." in out
    assert "map-repo" in out
    assert "say-hello" in out
    assert "Note: Faster: 12.0 s against 30.0 s per run" in out
    lines = err.splitlines()
    assert "accepted by the runner" in lines
    assert lines.index("accepted by the runner") < lines.index("queued 0/4") < lines.index("running 4/4")


async def test_a_refusal_exits_1_with_its_code_and_message(tmp_path: Path) -> None:
    subject = {
        "id": "ab" * 32 + ":someone-else/tool",
        "artifact": {"digest": "sha256:" + "0" * 64, "size": 2, "media_type": "application/json"},
    }
    async with hosted_service(tmp_path) as service:
        common, _, _ = service_settings(service, tmp_path)
        args = ("run", "--subject", json.dumps(subject), "--suite", str(EXAMPLE / "evals"), "--json", *common)
        code, out, _ = await trainer(*args)
        human_code, human, _ = await trainer(*args[: -len(common) - 1], *common)
    assert code == 1
    found = one_json(out)
    assert (found["outcome"], found["code"]) == ("refused", "not_admitted")
    assert found["message"] == "the hosted runner tests catalog tools and tools made in chat only"
    assert (found["verdict"], found["report"], found["cases"]) == (None, None, None)
    assert human_code == 1
    assert "Refused (not_admitted): the hosted runner tests catalog tools and tools made in chat only" in human


async def test_cancel_stops_a_waiting_run(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="wait_cancel") as service:
        common, _, requests = service_settings(service, tmp_path)
        running = asyncio.create_task(trainer("run", "--extension", str(EXAMPLE), "--json", *common))
        await asyncio.wait_for(service.suite.wait_started(1), WITHIN)
        [record] = requests.glob("*.json")
        code, out, err = await trainer("cancel", record.stem, "--json", *common)
        assert code == 0, err
        cancelled = one_json(out)
        assert cancelled["answer"]["type"] == "cancel_result"
        assert cancelled["result"]["outcome"] == "cancelled"
        code, out, _ = await asyncio.wait_for(running, WITHIN)
    assert code == 1
    found = one_json(out)
    assert (found["outcome"], found["message"]) == ("cancelled", "the requester stopped the run")


async def test_no_answer_is_worker_absent(tmp_path: Path) -> None:
    key, _ = key_file(tmp_path)
    nobody = SecretKey.generate().public_key().to_hex()
    async with local_relay() as url:
        common = settings(url, nobody, key, tmp_path / "requests")
        code, out, _ = await trainer("run", "--extension", str(EXAMPLE), "--json", "--timeout", "0.5", *common)
    assert code == 1
    found = one_json(out)
    assert (found["outcome"], found["silence"], found["result"]) == (None, "worker_absent", None)


async def test_usage_errors_exit_64_and_key_files_are_checked(tmp_path: Path) -> None:
    key, _ = key_file(tmp_path)
    runner = SecretKey.generate().public_key().to_hex()
    where = ["--relay", "ws://127.0.0.1:9", "--runner", runner, "--requests", str(tmp_path / "requests")]
    wrong = {
        "no key": ["run", "--extension", str(EXAMPLE), *where],
        "suite without subject": ["run", "--suite", str(EXAMPLE / "evals"), "--key-file", str(key), *where],
        "four runs": ["run", "--extension", str(EXAMPLE), "--runs", "4", "--key-file", str(key), *where],
        "two subjects": ["run", "--extension", str(EXAMPLE), "--subject", "{}", "--key-file", str(key), *where],
        "a bad runner": ["status", "x", "--key-file", str(key), *where, "--runner", "not-a-key"],
        "an unknown flag": ["cancel", "x", "--key-file", str(key), *where, "--whatever"],
        "no action": [],
        "an unknown action": ["stop", "x"],
    }
    for what, args in wrong.items():
        code, _, err = await trainer(*args)
        assert code == 64, (what, err)
        assert err.strip(), what

    open_key, _ = key_file(tmp_path / "open", 0o644)
    code, _, err = await trainer("run", "--extension", str(EXAMPLE), "--key-file", str(open_key), *where)
    assert code == 1
    assert f"the trainer key {open_key} is readable by others; chmod 600 it" in err

    made = tmp_path / "new-key"
    code, _, err = await trainer("run", "--extension", str(EXAMPLE), "--new-key", str(made), *where)
    assert code == 1, "the relay is unreachable"
    assert stat.S_IMODE(made.stat().st_mode) == 0o600
    pubkey = SecretKey.parse(made.read_text().strip()).public_key().to_hex()
    assert f"made a new trainer key in {made}; its public key is {pubkey}" in err
    code, _, err = await trainer("run", "--extension", str(EXAMPLE), "--new-key", str(made), *where)
    assert code == 64
    assert "already holds a key" in err


async def test_a_lost_relay_exits_1_naming_the_request_to_retransmit(tmp_path: Path) -> None:
    key, _ = key_file(tmp_path)
    runner = SecretKey.generate()
    async with local_relay() as url:
        jobs = await RelayConnection.open(url, runner, challenge_wait=0.05)
        try:
            assert await query_on(jobs, Filter.build(kinds=[25920], tags={"p": [runner.public_key().to_hex()]})) == []
            common = settings(url, runner.public_key().to_hex(), key, tmp_path / "requests")
            running = asyncio.create_task(trainer("run", "--extension", str(EXAMPLE), "--json", *common))
            async with asyncio.timeout(WITHIN):
                delivered = await jobs.next_frame()
                while not isinstance(delivered, RelayEvent):
                    delivered = await jobs.next_frame()
        finally:
            jobs.dispose()
    code, out, err = await asyncio.wait_for(running, WITHIN)
    assert code == 1
    found = one_json(out)
    [record] = (tmp_path / "requests").glob("*.json")
    assert found["error"] == "relay"
    assert found["message"].startswith("lost the relay")
    assert found["request"] == record.stem
    assert json.loads(record.read_text())["events"][0]["id"] == delivered.event.id
    assert f"`eval-runner trainer run --retransmit {record.stem}` asks again" in err


async def test_the_production_key_with_the_local_relay_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """No --relay: the local relay, which the production runner never reads, so its key is refused there."""
    key, _ = key_file(tmp_path)
    requests = tmp_path / "requests"
    code, out, err = await trainer(
        "run", "--extension", str(EXAMPLE), "--runner", RUNNER, "--key-file", str(key), "--requests", str(requests)
    )
    assert (code, out) == (64, "")
    assert err == (
        "eval-runner trainer: the production runner listens on wss://relay.openagents.com, not on the local "
        "relay ws://127.0.0.1:7447: pass --relay wss://relay.openagents.com to reach it, --runner with a local "
        "runner's key, or give both --relay and --runner to send there anyway\n"
    )
    assert not requests.exists()
