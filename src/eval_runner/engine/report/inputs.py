"""What a report is built from: one `Attempt` per planned run and the run's setup, as plain records.

Kept apart from the engine's run and grade records so building a report stays pure: the clock, the host
name and which parts were stand-ins are inputs too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report_documents import AgentPin
from eval_runner.contracts.strict_json import JsonValue, pretty
from eval_runner.engine.testset.cases import Suite
from eval_runner.engine.testset.catalog import Subject
from eval_runner.engine.verdict import scores as scoring
from eval_runner.engine.verdict.scores import Arm as RunSide
from eval_runner.engine.verdict.scores import OutcomeWord, PlannedCase

#: The engine version `reliance.agent`/`graders` and `environment.json` name.
ENGINE_VERSION = "0.1.0"
GRADES_SCHEMA = "openagents.ext-eval-grades.v1"
#: Errored runs with these reasons never started a turn, so they count as refused (runner.md §13.7).
REFUSED_REASONS = frozenset({"refused", "unconfined_host", "env_var_rejected"})


class StandIn(StrEnum):
    """A part of the run that was not the real thing (eval_runner.stand_ins): its result says nothing about it."""

    AGENT = "agent"
    DOOR = "door"


class RunEnd(StrEnum):
    """How one attempt ended, as the run records it (`errored` carries a reason)."""

    COMPLETED = "completed"
    ERRORED = "errored"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What one run used, as skill authors compare it: tokens in and out, model calls (`turns`) and tool
    calls; None where neither the door nor the agent said (`engine.report.figures` reads them)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    tool_calls: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of one case in one arm, after grading: what the orchestrator fills from a run
    record and its grades. `trajectory` is the ATIF-v1.8 document's exact bytes (`trajectory.json`);
    `created` holds each created path with its kept bytes (None when not copied); `grades` the grades
    document's exact bytes; `score`/`passed` the run's grade (both None when not scored)."""

    case: str
    arm: RunSide
    attempt: int
    end: RunEnd
    grades: bytes
    reason: str | None = None
    score: float | None = None
    passed: bool | None = None
    seconds: float | None = None
    cost_usd: float | None = None
    stdout: bytes | None = None
    stderr: bytes | None = None
    trajectory: bytes | None = None
    created: tuple[tuple[str, bytes | None], ...] = ()
    receipts: tuple[ArtifactRef, ...] = ()
    figures: RunFigures = RunFigures()

    @property
    def key(self) -> tuple[str, RunSide, int]:
        return (self.case, self.arm, self.attempt)

    @property
    def coverage_word(self) -> OutcomeWord:
        """The NIP-EVAL outcome word: an errored run is `refused` when it never started, else `failed`."""
        if self.end is RunEnd.ERRORED:
            return OutcomeWord.REFUSED if self.reason in REFUSED_REASONS else OutcomeWord.FAILED
        return OutcomeWord(self.end.value)


def run_path(case: str, arm: RunSide, attempt: int) -> str:
    """Where a run's files live under a results directory: `runs/<case>/<arm>-<attempt>`."""
    return f"runs/{case}/{arm.value}-{attempt}"


def grades_path(case: str, arm: RunSide, attempt: int) -> str:
    """A run's grades document under `artifacts/`."""
    return f"grades/{case}/{arm.value}-{attempt}.json"


@dataclass(frozen=True, slots=True)
class RunSetup:
    """How the suite ran: the options of runner.md §13.1 and the doors, by name (never a key)."""

    runs: int | None = None
    baseline: bool = True
    concurrency: int = 1
    grants: tuple[str, ...] = ("read", "write")
    #: Our sandbox's policy word (`engine.sandbox.NETWORK_POLICY`); the reference writes `open-door-proxied`.
    network: str = "door-only"
    confinement: str | None = "/usr/bin/bwrap"
    door: str = "default"
    baseline_door: str | None = None
    decision_door: str | None = None
    judge_door: str | None = None
    hosted: bool = True


@dataclass(frozen=True, slots=True)
class Defaults:
    """The `coder-defaults` release both arms held (a marginal report) and its lock, as the resolver wrote it."""

    release: EventRef
    lock: JsonValue = field(hash=False)


@dataclass(frozen=True, slots=True)
class ReportInputs:
    """Everything a report is built from. `author`/`package`/`component` name the suite
    (`<author>:<package>/<component>`); `host` is the host name (only its digest is written);
    `partial` the run's own reason it stopped (`the operator stopped the run`); `stand_ins` the parts
    that were stand-ins, said in the limitations and in `meta` so every reader shows it."""

    suite: Suite
    subject: Subject
    agent: AgentPin
    attempts: tuple[Attempt, ...]
    gate_file: bytes
    author: str
    package: str
    component: str
    evaluator: str
    started_at: int
    ended_at: int
    setup: RunSetup = RunSetup()
    subject_definition: bytes | None = None
    subject_release: EventRef | None = None
    suite_release: EventRef | None = None
    requester: EventRef | None = None
    host: str | None = None
    partial: str | None = None
    extra_limitations: tuple[str, ...] = ()
    defaults: Defaults | None = None
    engine_version: str = ENGINE_VERSION
    stand_ins: frozenset[StandIn] = frozenset()
    #: Whether the subject's programs went in (only the coder runs them): False, the subject lock lists none.
    programs_in: bool = True


def planned_cases(inputs: ReportInputs) -> tuple[PlannedCase, ...]:
    """The plan scoring reads: suite order, the request's runs when it overrides the cases', and which
    cases only the subject arm runs (every grader subject-only, runner.md §13.2)."""
    operations = inputs.subject.operations()
    return tuple(
        PlannedCase(
            id=case.name,
            kind=scoring.CaseKind(case.kind.value),
            runs=inputs.setup.runs or case.runs,
            subject_only=case.subject_only(operations),
        )
        for case in inputs.suite.cases
    )


def unknown_grades(case: str, arm: RunSide, attempt: int) -> bytes:
    """The grades document of a planned attempt nobody recorded: unknown, not graded."""
    return pretty(
        {
            "v": GRADES_SCHEMA,
            "requires": [],
            "case": case,
            "arm": arm.value,
            "attempt": attempt,
            "outcome": OutcomeWord.UNKNOWN.value,
            "reason": None,
            "score": None,
            "passed": None,
            "cost_usd": None,
            "seconds": None,
            "created_files": [],
            "graders": [],
        }
    )
