"""`eval run`'s logic (`local_eval`): what is checked before anything runs, the local identity, the door and
agent it picks, the decision door the environment names (as `serve` reads it), a host that cannot confine,
the temp root it makes and removes, and a stopped suite. Runs use real bubblewrap; the decision door is a
stand-in Jev on loopback; the command line itself is tested in tests/cli/test_main.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from eval_runner.contracts.report import Report
from eval_runner.engine.agents import BUILTIN_AGENT
from eval_runner.engine.grade.doors import DoorApi
from eval_runner.engine.grade.votes import NO_DECISION_DOOR
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.view import STAND_INS_KEY
from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.suite_run import DoorSettings, Finished, ProgressEvent, SuiteOutcome
from eval_runner.engine.testset.catalog import LOCAL_KEY, resolve_extension
from eval_runner.local_eval import (
    DEFAULT_KEY_ENV,
    MAX_TEMP_ROOT_BYTES,
    STAND_IN_AGENT,
    EvalRunOptions,
    LocalEval,
    LocalEvalError,
    prepare,
    run_blocking,
    run_local,
)
from eval_runner.stand_ins.scripted_doors import Play, Say, ScriptedDoor
from tests.support.paths import EXAMPLE

KEY = "local-eval-test-door-key-5c1e"
KEYED = {DEFAULT_KEY_ENV: KEY}


@pytest.fixture
def temp_base() -> Iterator[Path]:
    """A short base under /tmp the sandbox user can search, for `EVAL_RUNNER_TMP`."""
    base = Path(tempfile.mkdtemp(prefix="er-t-", dir="/tmp"))
    os.chmod(base, 0o755)
    yield base
    remove_tree(base)


def env(**values: str) -> dict[str, str]:
    """A process environment holding only `values`."""
    return values


def options(**changes: Any) -> EvalRunOptions:
    return replace(EvalRunOptions(extension=EXAMPLE), **changes)


def copy_example(tmp_path: Path) -> Path:
    target = tmp_path / "ext"
    shutil.copytree(EXAMPLE, target)
    return target


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    path.chmod(0o755)
    return path


# --- before anything runs --------------------------------------------------------------------------


def test_the_local_identity_is_the_tools_author_and_the_local_key(tmp_path: Path) -> None:
    local = prepare(options(runs=2, out=tmp_path / "out"), env())
    tool = resolve_extension(EXAMPLE)
    plan = local.plan(DoorSettings("http://127.0.0.1:1", KEY, local.model), tmp_path)
    assert plan.author.author == tool.definition.author == LOCAL_KEY
    assert plan.author.package == "codebase-brief-tests"
    assert plan.author.component == "suite"
    assert plan.author.evaluator == "0" * 64
    assert plan.author.suite_release is None
    assert plan.author.requester is None
    assert plan.hosted is False
    assert plan.subject_definition == tool.record
    assert (plan.runs, plan.concurrency) == (2, 4)
    assert plan.results_base == (tmp_path / "out").resolve()
    assert [case.name for case in local.suite.cases] == ["greeting", "overview"]
    assert local.planned == 2 * 2 * 2


def test_with_nothing_given_the_stand_ins_are_used_and_said(tmp_path: Path) -> None:
    local = prepare(options(), env())
    assert local.agent == STAND_IN_AGENT
    assert local.door is None
    assert local.model == "stand-in"
    assert local.runs is None
    said = " ".join(local.notices)
    for words in ("stand-in agent", "EVAL_RUNNER_CODER", "offline stand-in", "--door-url URL --door-key-env NAME"):
        assert words in said
    assert local.stand_ins == {StandIn.AGENT, StandIn.DOOR}
    assert local.plan(DoorSettings("http://127.0.0.1:1", KEY, local.model), tmp_path).stand_ins == local.stand_ins


def test_the_stand_in_agent_is_named_a_stand_in_however_it_is_given(tmp_path: Path) -> None:
    by_env = prepare(options(door_url="http://127.0.0.1:9"), {"EVAL_RUNNER_CODER": str(STAND_IN_AGENT), **KEYED})
    assert by_env.stand_ins == {StandIn.AGENT}
    link = tmp_path / "coder"
    link.symlink_to(STAND_IN_AGENT)
    by_flag = prepare(options(agent=link), env())
    assert by_flag.stand_ins == {StandIn.AGENT, StandIn.DOOR}
    real = prepare(options(agent=executable(tmp_path / "real"), door_url="http://127.0.0.1:9"), KEYED)
    assert real.stand_ins == frozenset()


def test_a_real_door_with_no_agent_named_runs_the_built_in_agent() -> None:
    local = prepare(options(door_url="http://127.0.0.1:9"), KEYED)
    assert local.agent == BUILTIN_AGENT
    assert local.stand_ins == frozenset()
    assert any("the built-in agent" in notice for notice in local.notices)


def test_the_agent_and_model_come_from_the_environment(tmp_path: Path) -> None:
    coder = executable(tmp_path / "coder")
    local = prepare(options(), env(EVAL_RUNNER_CODER=str(coder), CODER_MODEL="some/model"))
    assert local.agent == coder
    assert local.model == "some/model"
    assert not any("agent" in notice for notice in local.notices)
    given = executable(tmp_path / "given")
    chosen = prepare(options(agent=given, model="m2"), env(EVAL_RUNNER_CODER=str(coder), CODER_MODEL="x"))
    assert (chosen.agent, chosen.model) == (given, "m2")


def test_the_judge_speaks_anthropic_for_claude_code_unless_told_otherwise(tmp_path: Path) -> None:
    claude = f"claude-code:{executable(tmp_path / 'claude')}"
    door = "http://127.0.0.1:9"
    assert prepare(options(agent_kind=claude, door_url=door), KEYED).door_api is DoorApi.ANTHROPIC
    assert prepare(options(agent_kind=claude, door_url=door, door_api="chat"), KEYED).door_api is DoorApi.CHAT
    assert prepare(options(door_url=door), KEYED).door_api is DoorApi.RESPONSES
    assert prepare(options(door_url=door, door_api="anthropic"), KEYED).door_api is DoorApi.ANTHROPIC
    assert prepare(options(), env()).door_api is DoorApi.RESPONSES
    with pytest.raises(LocalEvalError, match="the offline stand-in door speaks only responses"):
        prepare(options(door_api="anthropic"), env())
    with pytest.raises(LocalEvalError, match="is not one of responses, anthropic, chat"):
        prepare(options(door_url=door, door_api="grpc"), KEYED)


def test_a_real_door_takes_its_key_from_the_named_variable_and_never_shows_it() -> None:
    local = prepare(options(door_url="https://door.example/", door_key_env="MY_KEY"), env(MY_KEY=KEY))
    assert local.door == DoorSettings("https://door.example", KEY, "stand-in")
    assert not any("stand-in with canned answers" in notice for notice in local.notices)
    assert KEY not in repr(local)
    default = prepare(options(door_url="http://127.0.0.1:9"), {DEFAULT_KEY_ENV: KEY})
    assert default.door == DoorSettings("http://127.0.0.1:9", KEY, "stand-in")


@pytest.mark.parametrize(
    ("changes", "environ", "said"),
    [
        ({"door_url": "http://127.0.0.1:9"}, {}, f"the door key is missing: set ${DEFAULT_KEY_ENV}"),
        ({"door_url": "http://127.0.0.1:9", "door_key_env": "K"}, {"K": "  "}, "the door key is missing: set $K"),
        ({"door_key_env": "K"}, {"K": KEY}, "give its --door-url too"),
        ({"door_url": "http://h", "door_key_env": "NOT-A-NAME"}, {}, "is not an environment variable name"),
        ({"door_url": "ftp://h"}, {DEFAULT_KEY_ENV: KEY}, "is not an http or https URL"),
        ({"door_url": "https://h/?key=1"}, {DEFAULT_KEY_ENV: KEY}, "is not an http or https URL"),
        ({"runs": 11}, {}, "--runs must be from 1 to 10"),
        ({"concurrency": 0}, {}, "--concurrency must be from 1 to 8"),
        ({}, {"EVAL_RUNNER_CODER": "/no/such/coder"}, "EVAL_RUNNER_CODER /no/such/coder is not an executable file"),
        ({}, {"EVAL_RUNNER_TMP": "/no/such/dir"}, "EVAL_RUNNER_TMP=/no/such/dir is not a directory"),
        ({"extension": Path("/no/such/ext")}, {}, "/no/such/ext is not a directory"),
        ({"extension": Path("/tmp")}, {}, "/tmp is not an extension directory: it has no package.json or SKILL.md"),
    ],
)
def test_bad_input_is_one_plain_line(changes: dict[str, object], environ: dict[str, str], said: str) -> None:
    with pytest.raises(LocalEvalError) as caught:
        prepare(options(**changes), environ)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)
    assert KEY not in str(caught.value)


def test_an_agent_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "coder"
    plain.write_text("#!/bin/sh\n", encoding="utf-8")
    plain.chmod(0o644)
    with pytest.raises(LocalEvalError, match=f"^--agent {plain} is not an executable file$"):
        prepare(options(agent=plain), env())
    with pytest.raises(LocalEvalError, match=f"^--agent {tmp_path} is not an executable file$"):
        prepare(options(agent=tmp_path), env())


def test_a_package_that_does_not_resolve_names_the_directory(tmp_path: Path) -> None:
    ext = copy_example(tmp_path)
    (ext / "package.json").write_text('{"v": 1, "slug": "Not A Slug"}', encoding="utf-8")
    with pytest.raises(LocalEvalError, match=r"ext does not resolve as an extension: .*package\.json"):
        prepare(options(extension=ext), env())


def test_a_test_set_that_does_not_load_names_the_file_and_key(tmp_path: Path) -> None:
    ext = copy_example(tmp_path)
    prompt = ext / "evals" / "overview" / "prompt.md"
    prompt.write_text(prompt.read_text().replace('kind = "should-fire"', 'kind = "should-fire"\ncolour = "red"'))
    with pytest.raises(LocalEvalError) as caught:
        prepare(options(extension=ext), env())
    message = str(caught.value)
    assert message.startswith(f"the test set does not load: {prompt}: unknown key `colour`")


def test_an_extension_without_evals_says_there_are_no_tests(tmp_path: Path) -> None:
    ext = copy_example(tmp_path)
    shutil.rmtree(ext / "evals")
    with pytest.raises(LocalEvalError, match="there are no tests yet"):
        prepare(options(extension=ext), env())


# --- running ---------------------------------------------------------------------------------------


def local_for(tmp_path: Path, temp_base: Path, **changes: object) -> LocalEval:
    return prepare(options(out=tmp_path / "results", **changes), env(EVAL_RUNNER_TMP=str(temp_base)))


async def test_a_host_that_cannot_confine_runs_nothing(tmp_path: Path, temp_base: Path) -> None:
    local = local_for(tmp_path, temp_base)
    with pytest.raises(LocalEvalError, match=r"cannot confine the agent's runs, so nothing ran: .*not installed"):
        await run_local(local, bwrap="/no/such/bwrap")
    assert not (tmp_path / "results").exists()
    assert list(temp_base.iterdir()) == []


async def test_a_temp_root_too_long_for_the_door_sockets_is_refused(tmp_path: Path, temp_base: Path) -> None:
    deep = temp_base / ("d" * (MAX_TEMP_ROOT_BYTES - len(str(temp_base))))
    deep.mkdir()
    local = local_for(tmp_path, deep)
    with pytest.raises(LocalEvalError, match="too long for the run's door sockets"):
        await run_local(local)
    assert list(deep.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root runner drops to the sandbox's uid")
async def test_a_temp_root_the_sandbox_user_cannot_reach_is_refused(tmp_path: Path, temp_base: Path) -> None:
    closed = temp_base / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    local = local_for(tmp_path, closed / "inner")
    with pytest.raises(LocalEvalError, match=f"cannot reach {closed}/inner/er-.*: {closed} is not searchable"):
        await run_local(local)
    assert list((closed / "inner").iterdir()) == []


async def test_a_run_stopped_before_it_starts_writes_a_partial_report(tmp_path: Path, temp_base: Path) -> None:
    local = local_for(tmp_path, temp_base, runs=1)
    stop = asyncio.Event()
    stop.set()
    seen: list[ProgressEvent] = []
    outcome = await run_local(local, on_progress=seen.append, cancel=stop)
    assert outcome.cancelled
    assert seen == []
    assert outcome.results_dir.parent == (tmp_path / "results").resolve()
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert report.verdict.value == "inconclusive"
    assert report.coverage.subject.cancelled == 2
    assert outcome.built.limitations.partial == "the operator stopped the run"
    assert list(temp_base.iterdir()) == []


async def test_a_run_through_the_stand_in_door_grades_both_arms(tmp_path: Path, temp_base: Path) -> None:
    local = local_for(tmp_path, temp_base, runs=2, concurrency=2)
    seen: list[ProgressEvent] = []
    outcome = await run_local(local, on_progress=seen.append)
    assert not outcome.cancelled
    finished = [event for event in seen if type(event).__name__ == "Finished"]
    assert len(finished) == local.planned == 8
    assert outcome.built.decision.verdict.word == "Better"
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert report.ext_eval.reliance is not None
    assert report.ext_eval.reliance.runner is None  # hosted = False
    assert report.evaluator == LOCAL_KEY
    assert report.meta_extra[STAND_INS_KEY] == ["agent", "door"]
    # What the terminal's wall time covers: the suite, and the setup before it, measured apart.
    assert outcome.seconds is not None
    assert outcome.setup_seconds is not None
    assert outcome.seconds >= max(event.seconds for event in finished if isinstance(event, Finished))
    assert list(temp_base.iterdir()) == []


def test_the_first_interrupt_stops_the_suite_and_a_second_one_quits_at_once() -> None:
    told: list[str] = []

    async def stopped(cancel: asyncio.Event) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await cancel.wait()
        return "stopped"

    assert run_blocking(stopped, on_interrupt=lambda: told.append("stopping")) == "stopped"
    assert told == ["stopping"]

    async def stuck(cancel: asyncio.Event) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await cancel.wait()
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(KeyboardInterrupt):
        run_blocking(stuck)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --- the decision door -------------------------------------------------------------------------------

JEV_KEY = "jev-key-local-eval-7c3a91"
#: A decision grader for the example's overview case: does the reply name the largest file?
JUDGED = '+++\ntype = "decision"\nquestion = "Does the answer name the largest file?"\n+++\n\nIt names src/tables.rs.\n'


@dataclass
class StandInJev:
    """A stand-in Jev (System One) door on loopback: requires `Bearer <key>` and answers a noul question
    0.9 when the run it is asked about names src/tables.rs, else 0.1; keeps what it was asked."""

    key: str
    asked: list[Any] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def __aenter__(self) -> StandInJev:
        app = web.Application()
        app.router.add_post("/v1/systemone", self._answer)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _answer(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"code": "unauthenticated", "message": "bad key"}}, status=401)
        body = await request.json()
        self.asked.append(body)
        p = 0.9 if "src/tables.rs" in json.dumps(body["state"]["run"]) else 0.1
        return web.json_response({"model": "jev-latest", "answers": {"grade": {"type": "noul", "noul": p}}})


@pytest.fixture
async def jev() -> AsyncIterator[StandInJev]:
    async with StandInJev(JEV_KEY) as door:
        yield door


def with_a_decision_grader(tmp_path: Path) -> Path:
    ext = copy_example(tmp_path)
    (ext / "evals" / "overview" / "graders" / "judged.md").write_text(JUDGED, encoding="utf-8")
    return ext


def judged(outcome: SuiteOutcome, arm: str) -> dict[str, Any]:
    grades = json.loads((outcome.results_dir / "artifacts" / "grades" / "overview" / f"{arm}-1.json").read_bytes())
    [found] = [grader for grader in grades["graders"] if grader["name"] == "judged"]
    assert found["type"] == "decision"
    return dict(found)


async def test_decision_graders_ask_the_decision_door_the_environment_names(
    tmp_path: Path, temp_base: Path, jev: StandInJev
) -> None:
    environ = env(EVAL_RUNNER_TMP=str(temp_base), TYPESAFE_API_KEY=JEV_KEY, TYPESAFE_BASE_URL=jev.url + "/")
    local = prepare(options(extension=with_a_decision_grader(tmp_path), out=tmp_path / "results", runs=1), environ)
    assert local.decision is not None
    assert local.decision.describe() == jev.url
    assert f"decision door: {jev.url}" in local.notices
    assert JEV_KEY not in repr(local)
    outcome = await run_local(local)
    with_it, without = judged(outcome, "subject"), judged(outcome, "baseline")
    assert (with_it["passed"], with_it["explanation"]) == (True, "2 of 2 answers at or above 0.5; 2 needed")
    assert (without["passed"], without["explanation"]) == (False, "0 of 2 answers at or above 0.5; 2 needed")
    assert len(jev.asked) == 4
    assert {asked["questions"]["grade"]["instructions"] for asked in jev.asked} == {
        "Does the answer name the largest file?"
    }
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert report.ext_eval.reliance is not None
    assert report.ext_eval.reliance.selector == "decision"
    for path in (path for path in outcome.results_dir.rglob("*") if path.is_file()):
        assert JEV_KEY.encode() not in path.read_bytes(), path
    assert list(temp_base.iterdir()) == []


async def test_without_a_decision_door_decision_graders_fail_and_say_so_first(tmp_path: Path, temp_base: Path) -> None:
    environ = env(EVAL_RUNNER_TMP=str(temp_base))
    local = prepare(options(extension=with_a_decision_grader(tmp_path), out=tmp_path / "results", runs=1), environ)
    assert local.decision is None
    assert any(
        notice.startswith("decision door: none, so this test set's decision graders fail") for notice in local.notices
    )
    outcome = await run_local(local)
    for arm in ("subject", "baseline"):
        assert (judged(outcome, arm)["passed"], judged(outcome, arm)["explanation"]) == (False, NO_DECISION_DOOR)
    assert NO_DECISION_DOOR == "no decision door is configured"


def test_the_decision_door_is_read_as_serve_reads_it() -> None:
    """The gateway borrows the door's key when the door is the gateway; every Jev key is scrubbed from runs."""
    environ = {DEFAULT_KEY_ENV: KEY, "TYPESAFE_API_KEY": JEV_KEY, "OPENROUTER_API_KEY": "or-key"}
    local = prepare(options(door_url="https://ai-gateway.vercel.sh/"), environ)
    assert local.decision is not None
    assert local.decision.describe() == "https://ai-gateway.vercel.sh → https://openrouter.ai → https://api.typesafe.ai"
    assert set(local.decision_keys) == {KEY, "or-key", JEV_KEY}
    assert set(local.plan(local.door or DoorSettings("", "", ""), Path("/tmp")).secrets) == {KEY, "or-key", JEV_KEY}
    assert prepare(options(), {"OPENROUTER_API_KEY": "or-key"}).decision is None, "no TypeSafe key, no door"
    assert not any("decision" in notice for notice in prepare(options(), {}).notices), "no decision graders here"


# --- a skill directory (SKILL.md and its test set) -------------------------------------------------

SKILL_EXAMPLE = EXAMPLE.parent / "brief"


def skill_copy(tmp_path: Path, *, evals_json_only: bool = False) -> Path:
    target = tmp_path / "brief"
    shutil.copytree(SKILL_EXAMPLE, target)
    if evals_json_only:
        for case in ("overview", "greeting"):
            shutil.rmtree(target / "evals" / case)
    return target


def test_a_skill_directory_is_an_extension_eval_run_accepts(tmp_path: Path) -> None:
    local = prepare(options(extension=SKILL_EXAMPLE, out=tmp_path / "out"), env())
    assert local.tool.definition.id == f"{LOCAL_KEY}:brief/skill"
    assert local.tool.subject.programs == ()
    assert [case.name for case in local.suite.cases] == ["greeting", "overview"]
    assert local.author.package == "brief-tests"
    assert "test set: also found evals/evals.json, which was not read; one test set per extension" in local.notices


def test_a_skill_directorys_evals_json_is_its_test_set_when_it_has_no_case_directories(tmp_path: Path) -> None:
    local = prepare(options(extension=skill_copy(tmp_path, evals_json_only=True), out=tmp_path / "out"), env())
    assert [case.name for case in local.suite.cases] == ["eval-1", "eval-2"]
    assert local.notices[0] == "test set: 2 cases read from evals/evals.json"


def test_a_bad_evals_json_names_the_file_and_the_field(tmp_path: Path) -> None:
    ext = skill_copy(tmp_path, evals_json_only=True)
    evals = ext / "evals" / "evals.json"
    evals.write_text(evals.read_text().replace('"type": "contains"', '"type": "startswith"', 1))
    with pytest.raises(LocalEvalError) as caught:
        prepare(options(extension=ext), env())
    where = f"{evals}: evals[0].assertions[0].type"
    assert str(caught.value) == f"the test set does not load: {where}: an assertion's type is contains or not_contains"


def test_a_skill_md_that_does_not_follow_the_standard_is_refused(tmp_path: Path) -> None:
    ext = skill_copy(tmp_path)
    skill = ext / "SKILL.md"
    skill.write_text(skill.read_text().replace("name: brief", "name: Brief Skill"))
    with pytest.raises(LocalEvalError, match=r"brief does not resolve as an extension: .*SKILL\.md: `name` is"):
        prepare(options(extension=ext), env())


@pytest.mark.parametrize("evals_json_only", [False, True], ids=["case-directories", "evals-json"])
async def test_a_skill_directory_runs_through_the_stand_in_door_in_both_arms(
    tmp_path: Path, temp_base: Path, evals_json_only: bool
) -> None:
    ext = skill_copy(tmp_path, evals_json_only=evals_json_only)
    local = local_for(tmp_path, temp_base, extension=ext, runs=2, concurrency=2)
    assert local.planned == 8
    outcome = await run_local(local)
    # The SKILL.md's guidance reaches the agent in the with arm only, so the overview passes there alone and
    # the greeting (should-not-fire) passes in both.
    passed = {
        (case.kind.value, case.subject.runs_passed, case.baseline.runs_passed if case.baseline else None)
        for case in outcome.built.scores.cases
    }
    assert passed == {("should-fire", 2, 0), ("should-not-fire", 2, 2)}
    # (Not the verdict word: its time ceiling compares wall times of 0.2 s runs, which a loaded machine moves.)
    headline = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes()).ext_eval.headline
    assert (headline.subject_passed, headline.baseline_passed, headline.total) == (2, 1, 2)
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert report.subject.definition.id == f"{LOCAL_KEY}:brief/skill"
    assert list(temp_base.iterdir()) == []


def test_another_agent_than_coder_is_told_before_the_run_that_the_programs_stay_out(tmp_path: Path) -> None:
    claude = executable(tmp_path / "claude")
    real = {"agent_kind": "claude-code", "agent": claude, "door_url": "http://127.0.0.1:9", "out": tmp_path / "out"}
    local = prepare(options(**real), env(**KEYED))
    assert (
        "programs: the extension's program (codebase-brief) run only under coder, "
        "so claude-code gets its skills and not its program"
    ) in local.notices
    skill_only = prepare(options(extension=SKILL_EXAMPLE, **real), env(**KEYED))
    assert not any(notice.startswith("programs:") for notice in skill_only.notices)
    coder = prepare(options(out=tmp_path / "out"), env())
    assert not any(notice.startswith("programs:") for notice in coder.notices)


def test_another_agent_than_coder_runs_no_programs_and_the_report_says_so(tmp_path: Path) -> None:
    door = DoorSettings("http://127.0.0.1:9", KEY, "m")
    real = {"agent": executable(tmp_path / "agent"), "door_url": "http://127.0.0.1:9", "out": tmp_path / "out"}
    for kind in ("claude-code", "codex", "builtin"):
        plan = prepare(options(agent_kind=kind, **real), env(**KEYED)).plan(door, tmp_path)
        assert not plan.programs_in, kind
        (sentence,) = plan.extra_limitations
        assert sentence.startswith("The extension's program (codebase-brief) did not run: ")
        assert kind in sentence
    skill_only = prepare(options(extension=SKILL_EXAMPLE, agent_kind="claude-code", **real), env(**KEYED))
    assert skill_only.plan(door, tmp_path).extra_limitations == ()
    coder = prepare(options(out=tmp_path / "out"), env()).plan(door, tmp_path)
    assert (coder.programs_in, coder.extra_limitations) == (True, ())
    named_coder = prepare(options(agent_kind="coder", agent=real["agent"], out=tmp_path / "out"), env())
    assert named_coder.plan(door, tmp_path).programs_in


async def test_the_judge_asks_in_the_api_the_door_speaks(tmp_path: Path, temp_base: Path) -> None:
    """A door with only Chat Completions and `--door-api chat`: the built-in agent and the judge graders of an
    `evals.json` string assertion both speak it, through the real sandbox and door proxy."""
    ext = skill_copy(tmp_path, evals_json_only=True)
    evals = {
        "skill_name": "brief",
        "evals": [{"id": 1, "prompt": "Name the language of this repository.", "assertions": ["It names Rust."]}],
    }
    (ext / "evals" / "evals.json").write_text(json.dumps(evals))
    plays = [Play("## Criterion", (Say("PASS"),)), Play("Name the language", (Say("It is Rust."),))]
    async with ScriptedDoor(KEY, plays, speaks=("chat",)) as door:
        given = options(extension=ext, door_url=door.url, door_api="chat", runs=1, out=tmp_path / "results")
        local = prepare(given, {**KEYED, "EVAL_RUNNER_TMP": str(temp_base)})
        assert (local.agent, local.door_api) == (BUILTIN_AGENT, DoorApi.CHAT)
        outcome = await run_local(local)
    assert [(attempt.arm.value, attempt.passed) for attempt in outcome.built.attempts] == [
        ("subject", True),
        ("baseline", True),
    ]
    # Per arm one agent call (after its Responses call's 404) and three judge votes, all in Chat Completions.
    assert [call.api for call in door.calls].count("chat") == 2 * (1 + 3)
    assert {call.api for call in door.calls} == {"chat", "other"}
    assert door.refused == 0
