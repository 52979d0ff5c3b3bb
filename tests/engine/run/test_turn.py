"""One run under the child contract (runner.md §13.4): layout, environment, command, outcomes, deadline,
cancellation. The agent is tests/support/stand_in_sandboxed_agent.py, in a real sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.layout import reachable
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.run.turn import (
    CODER_DOOR_PORT,
    DECISION_DOOR_PORT,
    DoorSetup,
    RunOutcome,
    errored,
    run_once,
)
from eval_runner.engine.testset.cases import Operation
from tests.support.sandboxed_runs import (
    AGENT,
    MODEL,
    PROMPT,
    fresh_temp_root,
    host_confinement,
    make_temp_root,
    processes_holding,
    report,
    run_act,
    spec_for,
    still_running,
)
from tests.support.stand_in_door_proxy import StandInDoorProxy, StandInDoors


@pytest.fixture(scope="session")
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def _path_variable() -> str:
    extras = [extra for extra in ("/opt/homebrew/bin", "/usr/local/bin") if os.path.isdir(extra)]
    return ":".join(["/usr/bin:/bin:/usr/sbin:/sbin", *extras])


async def test_the_agent_gets_the_contract_and_exactly_its_environment(
    confinement: Confinement, temp_root: Path
) -> None:
    guidance = "## Case instructions\n\nBe brief.\n"
    spec = spec_for(
        temp_root,
        "contract",
        env={"OA_EVAL_COLOUR": "blue"},
        guidance=guidance,
        programs=(("dependency-check", b'{"program": 1}'), ("other", b"{}")),
        questions=(("router.json", b'{"questions": []}'),),
        fixtures=(("src/a.txt", b"A"), ("b.txt", b"B")),
    )
    doors = StandInDoors()
    record = await run_act(spec, confinement, doors=doors, decision=True)
    result = report(record)
    root = Path(result["cwd"]).parents[1]
    assert root.parent == temp_root
    assert root.name.startswith("oa-eval-")
    expected = {
        "HOME": f"{root}/home",
        "OPENAGENTS_HOME": f"{root}/home/.openagents",
        "TMPDIR": f"{root}/tmp",
        "TMP": f"{root}/tmp",
        "CODER_TRACE_DIR": f"{root}/out/trace",
        "PATH": _path_variable(),
        "LANG": "en_US.UTF-8",
        "USER": "eval",
        "LOGNAME": "eval",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "GIT_CEILING_DIRECTORIES": str(root),
        "GIT_CONFIG_NOSYSTEM": "1",
        "CODER_DOOR_URL": f"http://127.0.0.1:{CODER_DOOR_PORT}",
        "CODER_DOOR_KEY": "[redacted]",  # the proxy's token, scrubbed from what is kept
        "CODER_MODEL": MODEL,
        "CODER_DELEGATE": "off",
        "CODER_SHELL": "off",
        "TYPESAFE_BASE_URL": f"http://127.0.0.1:{DECISION_DOOR_PORT}",
        "TYPESAFE_API_KEY": "[redacted]",
        "CODER_PROGRAMS": "dependency-check,other",
        "CODER_PROGRAM_EFFECTS": "reads,writes",
        "CODER_GUIDANCE": f"{root}/guidance.md",
        "CODER_GUIDANCE_DIGEST": "sha256:" + hashlib.sha256(guidance.encode()).hexdigest(),
        "OA_EVAL_ACT": "contract",
        "OA_EVAL_COLOUR": "blue",
    }
    assert list(result["env"].items()) == list(expected.items())  # nothing else, and in the contract's order
    assert result["argv"] == [
        "--prompt-file",
        f"{root}/prompt.md",
        "--trace",
        f"{root}/out/trajectory.atif.jsonl",
        "--json",
    ]
    assert record.stdout.count(b"[redacted]") == 2
    assert doors.one("coder").token != doors.one("decision").token
    assert result["cwd"] == f"{root}/home/cwd"
    assert result["stdin"] == ""
    assert (result["uid"], result["gid"]) == (65534, 65534)
    assert result["prompt"] == PROMPT
    assert result["guidance"] == guidance
    assert result["openagents"] == {
        "programs/dependency-check.json": '{"program": 1}',
        "programs/other.json": "{}",
        "questions/router.json": '{"questions": []}',
    }
    assert result["fixtures"] == {"src/a.txt": "A", "b.txt": "B"}
    assert record.outcome == RunOutcome("completed")
    assert record.cost_usd == 0.25
    assert all(proxy.closed for proxy in doors.made)


async def test_without_doors_guidance_or_programs_their_variables_are_absent(
    confinement: Confinement, temp_root: Path
) -> None:
    spec = spec_for(temp_root, "contract", grants=frozenset({Operation.READ}))
    env = report(await run_act(spec, confinement))["env"]
    assert env["CODER_PROGRAMS"] == "none"
    assert env["CODER_PROGRAM_EFFECTS"] == "reads"
    assert not {"CODER_DOOR_URL", "CODER_DOOR_KEY", "TYPESAFE_BASE_URL", "TYPESAFE_API_KEY"} & set(env)
    assert not {"CODER_GUIDANCE", "CODER_GUIDANCE_DIGEST"} & set(env)


async def test_an_exec_grant_leaves_the_shell_on_and_names_subprocesses(
    confinement: Confinement, temp_root: Path
) -> None:
    spec = spec_for(temp_root, "contract", grants=frozenset({Operation.READ, Operation.WRITE, Operation.EXEC}))
    env = report(await run_act(spec, confinement))["env"]
    assert "CODER_SHELL" not in env
    assert env["CODER_PROGRAM_EFFECTS"] == "reads,writes,subprocesses"


@pytest.mark.parametrize("key", ["PATH", "OA_EVAL_lower", "LD_PRELOAD", "OA_EVALX"])
async def test_a_case_variable_outside_oa_eval_rejects_the_run_before_anything_starts(
    confinement: Confinement, temp_root: Path, key: str
) -> None:
    doors = StandInDoors()
    record = await run_act(spec_for(temp_root, "contract", env={key: "1"}), confinement, doors=doors)
    assert record.outcome == errored("env_var_rejected")
    assert (record.stdout, record.workspace, doors.made) == (b"", None, [])
    assert os.listdir(temp_root) == []


async def test_an_unconfined_host_runs_nothing(temp_root: Path) -> None:
    doors = StandInDoors()
    record = await run_act(spec_for(temp_root, "contract"), Unconfined("/usr/bin/bwrap is not installed"), doors=doors)
    assert record.outcome == errored("unconfined_host")
    assert record.detail == "/usr/bin/bwrap is not installed"
    assert (record.stdout, doors.made, os.listdir(temp_root)) == (b"", [], [])


async def test_a_network_grant_is_refused(confinement: Confinement, temp_root: Path) -> None:
    spec = spec_for(temp_root, "contract", grants=frozenset({Operation.READ, Operation.NETWORK}))
    record = await run_act(spec, confinement)
    assert record.outcome == errored("refused")
    assert os.listdir(temp_root) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("fixtures", (("../escape.txt", b"x"),)),
        ("fixtures", (("/etc/passwd", b"x"),)),
        ("fixtures", (("a//b", b"x"),)),
        ("programs", (("../slug", b"{}"),)),
        ("questions", ((".hidden", b"{}"),)),
    ],
)
async def test_a_layout_that_would_escape_refuses_the_run(
    confinement: Confinement, temp_root: Path, field: str, value: object
) -> None:
    changes: dict[str, Any] = {field: value}
    record = await run_act(spec_for(temp_root, "contract", **changes), confinement)
    assert record.outcome == errored("refused")
    assert os.listdir(temp_root) == []


async def test_a_run_cancelled_before_it_starts_starts_nothing(confinement: Confinement, temp_root: Path) -> None:
    cancel = asyncio.Event()
    cancel.set()
    record = await run_act(spec_for(temp_root, "contract"), confinement, cancel=cancel)
    assert record.outcome == RunOutcome("cancelled")
    assert os.listdir(temp_root) == []


async def test_the_deadline_terms_then_kills_the_whole_sandbox(confinement: Confinement, temp_root: Path) -> None:
    doors = StandInDoors()
    spec = spec_for(temp_root, "stubborn", deadline_seconds=1.5)
    running = asyncio.ensure_future(run_act(spec, confinement, doors=doors))
    await _ready(doors, running)
    # bubblewrap, the bridge, the agent and its TERM-proof child in a session of its own.
    inside = processes_holding(str(temp_root))
    assert len(inside) >= 4
    record = await running
    assert record.outcome == errored("timeout")
    assert record.stdout == b"term\n"  # SIGTERM reached the agent through the bridge; it stayed; SIGKILL ended it
    assert still_running(inside) == []
    assert processes_holding(str(temp_root)) == {}


async def test_cancel_stops_the_run_and_it_ends_cancelled(confinement: Confinement, temp_root: Path) -> None:
    doors = StandInDoors()
    cancel = asyncio.Event()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "polite"), confinement, doors=doors, cancel=cancel))
    await _ready(doors, running)
    inside = processes_holding(str(temp_root))
    cancel.set()
    record = await running
    assert record.outcome == RunOutcome("cancelled")
    assert record.stdout == b"term\n"
    assert still_running(inside) == []


async def test_a_caller_that_gives_up_on_the_run_leaves_no_process_and_no_directory(
    confinement: Confinement, temp_root: Path
) -> None:
    doors = StandInDoors()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "stubborn"), confinement, doors=doors))
    await _ready(doors, running)
    inside = processes_holding(str(temp_root))
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert still_running(inside) == []
    assert os.listdir(temp_root) == []
    assert all(proxy.closed for proxy in doors.made)


async def _ready(doors: StandInDoors, running: asyncio.Future[Any]) -> None:
    """Wait until the agent has called its door's `/ready`, or fail if the run ended first."""
    ready = asyncio.ensure_future(doors.ready.wait())
    await asyncio.wait({ready, running}, return_when=asyncio.FIRST_COMPLETED)
    assert ready.done()
    assert not running.done()


async def test_an_exit_code_alone_never_errors_and_the_cost_is_the_last_outcome_lines(
    confinement: Confinement, temp_root: Path
) -> None:
    record = await run_act(spec_for(temp_root, "exits"), confinement)
    assert record.outcome == RunOutcome("completed")
    assert record.cost_usd == 1.5


async def test_an_agent_killed_by_a_signal_it_did_not_get_from_us_ends_errored(
    confinement: Confinement, temp_root: Path
) -> None:
    record = await run_act(spec_for(temp_root, "crash"), confinement)
    assert record.outcome == errored("crashed")
    assert record.stdout == b"crashing\n"


async def test_a_door_that_refuses_the_key_makes_the_run_auth_failed(confinement: Confinement, temp_root: Path) -> None:
    doors = StandInDoors(refuse=True)
    record = await run_act(spec_for(temp_root, "doors"), confinement, doors=doors, decision=True)
    assert record.outcome == errored("auth_failed")


async def test_both_doors_answer_through_the_bridge(confinement: Confinement, temp_root: Path) -> None:
    record = await run_act(spec_for(temp_root, "doors"), confinement, doors=StandInDoors(), decision=True)
    assert report(record) == {
        "coder": '200 {"door": "coder", "path": "/v1/responses"}',
        "decision": '200 {"door": "decision", "path": "/v1/decide"}',
    }


async def test_an_agent_that_cannot_be_executed_ends_spawn_failed(confinement: Confinement, temp_root: Path) -> None:
    home = make_temp_root()  # not in the temp root: no run may see anything there but its own directory
    try:
        agent = home / "not-executable"
        shutil.copy(AGENT, agent)
        os.chmod(agent, 0o644)
        record = await run_act(spec_for(temp_root, "contract", agent=agent), confinement)
        assert record.outcome == errored("spawn_failed")
        assert record.detail == f"nostart {agent}: Permission denied"
    finally:
        remove_tree(home)


async def test_a_sandbox_that_cannot_start_ends_sandbox_failed(confinement: Confinement, temp_root: Path) -> None:
    if confinement.outside_uid is None:
        pytest.skip("needs a runner that drops to another uid")
    # bwrap refuses to bind a read-only path that does not exist: the sandbox never starts.
    missing = Path(tempfile.mkdtemp(prefix="er-gone-", dir="/tmp"))
    missing.rmdir()
    record = await run_act(spec_for(temp_root, "contract", read_only_paths=(missing,)), confinement)
    assert record.outcome == errored("sandbox_failed")
    assert b"bwrap: " in record.stderr


async def test_the_workspace_stays_until_closed_and_nothing_else_does(
    confinement: Confinement, temp_root: Path
) -> None:
    record = await run_act(spec_for(temp_root, "contract", fixtures=(("kept.txt", b"k"),)), confinement)
    assert record.workspace is not None
    (root,) = temp_root.iterdir()
    assert sorted(path.name for path in root.iterdir()) == [
        ".owner",
        "home",
        "prompt.md",
    ]  # .owner: for the sweep of leftovers
    assert [path.name for path in (root / "home").iterdir()] == ["cwd"]
    assert (record.workspace.path / "kept.txt").read_bytes() == b"k"
    record.workspace.close()
    assert os.listdir(temp_root) == []


async def test_a_door_that_cannot_open_refuses_the_run_and_closes_the_others(
    confinement: Confinement, temp_root: Path
) -> None:
    doors = StandInDoors()

    def broken(socket_path: Path) -> StandInDoorProxy:
        raise OSError("no such door")

    setup = DoorSetup(coder=doors.coder, decision=broken)
    record = await run_once(
        spec_for(temp_root, "contract"), confinement=confinement, door=setup, cancel=asyncio.Event()
    )
    assert record.outcome == errored("refused")
    assert record.detail == "cannot open the run's door: no such door"
    assert [proxy.closed for proxy in doors.made] == [True]
    assert os.listdir(temp_root) == []


async def test_an_agent_the_sandbox_user_cannot_reach_runs_from_a_staged_copy(
    confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    """A clone under /root (mode 0700) run as root: the sandbox user (uid 65534) can't reach the agent where
    it is, so the run stages the same bytes in its own directory instead of failing to start."""
    if confinement.owner() is None:
        pytest.skip("the runner is not root, so the sandbox runs as the caller and reaches what the caller does")
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    agent = hidden / AGENT.name
    shutil.copyfile(AGENT, agent)
    agent.chmod(0o700)
    uid, gid = confinement.owner() or (0, 0)
    assert not reachable(agent, uid, gid)
    record = await run_act(spec_for(temp_root, "exits", agent=agent), confinement)
    assert record.outcome == RunOutcome("completed")
    assert record.cost_usd == 1.5
