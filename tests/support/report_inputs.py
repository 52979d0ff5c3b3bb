"""Report inputs for the report tests: a constructed two-case suite (`TWO_CASES`) and synthetic attempts
whose verdict reads Better, so the build, the page and the results directory are checked on one run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.report_documents import AgentPin, Question
from eval_runner.contracts.strict_json import digest_bytes, pretty
from eval_runner.engine.report.inputs import Attempt, ReportInputs, RunEnd, RunSetup
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Program, Skill, Subject
from eval_runner.engine.verdict.scores import Arm
from tests.support.paths import TESTS

GATE_FILE = (TESTS / "vectors/reference/gates/ext-eval-v2.json").read_bytes()
AUTHOR = "ab" * 32
RUNNER = "cd" * 32
S, B = Arm.SUBJECT, Arm.BASELINE
AT = 1_790_000_000
REGEX = '+++\ntype = "regex"\n+++\n\nok\n'


def write_cases(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


TWO_CASES = {
    "greeting/prompt.md": '+++\nv = "openagents.eval-case.v1"\nkind = "should-not-fire"\nruns = 3\n+++\nSay hello.\n',
    "greeting/graders/reply.md": REGEX,
    "overview/prompt.md": '+++\nv = "openagents.eval-case.v1"\nruns = 3\n+++\nDescribe this repository.\n',
    "overview/graders/answer.md": REGEX,
    "overview/fixtures/src/lib.rs": "pub fn lib() {}\n",
}

PACKAGE = b'{"v": 1, "slug": "repo-map", "program": {"name": "repo-map", "digest": "00"}}\n'


def subject() -> Subject:
    return Subject(
        slug="repo-map",
        definition=DefinitionRef(
            id=f"{RUNNER}:repo-map/repo-map",
            artifact=ArtifactRef.of_bytes(PACKAGE, "application/json", "openagents.coder-package.v1"),
        ),
        package_lock={"v": 1, "slug": "repo-map", "publisher": RUNNER},
        programs=(Program("repo-map", b'{"definition": {"id": "x/repo-map", "steps": []}}'),),
        skills=(Skill("brief", b"Map the repository first.\n"),),
    )


AGENT = AgentPin(digest=digest_bytes(b"coder"), size=5, questions=(Question("route.json", digest_bytes(b"q")),))


def grades(case: str, arm: Arm, number: int, passed: bool | None) -> bytes:
    return pretty(
        {"v": "openagents.ext-eval-grades.v1", "case": case, "arm": arm.value, "attempt": number, "passed": passed}
    )


def trajectory(case: str, arm: Arm, number: int) -> bytes:
    return pretty({"schema_version": "ATIF-v1.8", "session_id": f"{case}-{arm.value}-{number}", "steps": []})


def attempt(
    case: str,
    arm: Arm,
    number: int,
    passed: bool | None = True,
    *,
    end: RunEnd = RunEnd.COMPLETED,
    reason: str | None = None,
    seconds: float | None = 10.0,
    cost: float | None = 0.01,
    **extra: Any,
) -> Attempt:
    scored = passed is not None
    return Attempt(
        case=case,
        arm=arm,
        attempt=number,
        end=end,
        reason=reason,
        grades=grades(case, arm, number, passed),
        score=(1.0 if passed else 0.0) if scored else None,
        passed=passed,
        seconds=seconds,
        cost_usd=cost,
        stdout=b'{"outcome": "completed", "cost_usd": 0.01}\n' if end is RunEnd.COMPLETED else None,
        stderr=b"" if end is RunEnd.COMPLETED else None,
        trajectory=trajectory(case, arm, number) if end is RunEnd.COMPLETED else None,
        **extra,
    )


def better_attempts() -> tuple[Attempt, ...]:
    """`overview` passes 3 of 3 with the extension and 0 of 3 without; `greeting` passes everywhere.
    The extension is faster (12 s against 30 s per run) and the verdict reads Better."""
    out = []
    for number in (1, 2, 3):
        out.append(attempt("greeting", S, number, seconds=12.0))
        out.append(attempt("greeting", B, number, seconds=30.0))
        out.append(attempt("overview", S, number, seconds=12.0 + number / 10))
        out.append(attempt("overview", B, number, False, seconds=30.0))
    return tuple(out)


def inputs(evals: Path, attempts: tuple[Attempt, ...] | None = None, **changes: Any) -> ReportInputs:
    base = ReportInputs(
        suite=load_suite(evals),
        subject=subject(),
        agent=AGENT,
        attempts=better_attempts() if attempts is None else attempts,
        gate_file=GATE_FILE,
        author=AUTHOR,
        package="repo-map-tests",
        component="suite",
        evaluator=RUNNER,
        started_at=AT,
        ended_at=AT + 300,
        setup=RunSetup(runs=3),
        subject_definition=PACKAGE,
        subject_release=EventRef(id="11" * 32, pubkey=RUNNER, kind=3184),
        suite_release=EventRef(id="22" * 32, pubkey=AUTHOR, kind=3184),
        requester=EventRef(id="33" * 32, pubkey="44" * 32, kind=25920),
        host="runner-host",
    )
    return dataclasses.replace(base, **changes)
