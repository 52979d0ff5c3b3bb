"""Running a suite: plan the attempts, run them at most `concurrency` at a time, grade each, report.

The engine's one entry point, shared by the hosted runner and `eval run` (runner.md §13.2–13.3):
`run_suite` is `execute` (each attempt one sandboxed agent turn, graded at once so its workspace can go,
kept in plan order) then `evaluate` (scored against the plan, a planned attempt without a record reported
`unknown`), as the reference's `run::execute` and `run::evaluate_runs` are.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path

from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report_documents import AgentPin, Question
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.engine.grade.graders import (
    NOT_GRADED,
    RunGrades,
    RunView,
    WorkspaceDirectory,
    grade_run,
    grades_bytes,
    receipt_limitation,
)
from eval_runner.engine.grade.patterns import PatternRunner
from eval_runner.engine.grade.votes import NO_DOORS, Doors
from eval_runner.engine.report.build import BuiltReport, build_report
from eval_runner.engine.report.figures import run_figures
from eval_runner.engine.report.inputs import Attempt, Defaults, ReportInputs, RunEnd, RunSetup, StandIn
from eval_runner.engine.report.results_dir import suite_files, write_results
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.sandbox import Confinement, Limits, Unconfined
from eval_runner.engine.run.trajectory import Trajectory, TrajectoryError, parse_trajectory
from eval_runner.engine.run.turn import AgentAdapter, DoorSetup, RunRecord, RunSpec, run_once
from eval_runner.engine.testset.adopted import AdoptedDefaults
from eval_runner.engine.testset.cases import Case, Operation, Suite
from eval_runner.engine.testset.catalog import Program, Skill, Subject
from eval_runner.engine.verdict.scores import Arm

#: The operator grants of a hosted runner: read and sandbox write, never exec or network.
HOSTED_GRANTS = frozenset({Operation.READ, Operation.WRITE})
STOPPED_BY_OPERATOR = "the operator stopped the run"


def gate_file() -> bytes:
    """The exact bytes of the `ext-eval-v2` gate shipped with the engine (see gates/README.md)."""
    return resources.files("eval_runner.engine").joinpath("gates/ext-eval-v2.json").read_bytes()


@dataclass(frozen=True, slots=True)
class DoorSettings:
    """The chat door the agent (and the judge grader) reach: base URL, key and model. The key never
    appears in a repr."""

    url: str
    key: str = field(repr=False)
    model: str

    @property
    def label(self) -> str:
        return f"default/{self.model}"


@dataclass(frozen=True, slots=True)
class SuiteAuthor:
    """Who the suite and report are by: `<author>:<package>/<component>`, the evaluator's key, and the
    releases and request it names when there are any."""

    author: str
    package: str
    component: str
    evaluator: str
    suite_release: EventRef | None = None
    subject_release: EventRef | None = None
    requester: EventRef | None = None


@dataclass(frozen=True, slots=True)
class SuitePlan:
    """Everything one suite run needs. `runs` overrides every case's own runs when set (the hosted
    runner always sets it); `subject_definition` is the exact bytes the subject's DefinitionRef digests;
    `stand_ins` names the parts that are stand-ins (`eval_runner.stand_ins`), which the report then says
    wherever a person reads it."""

    suite: Suite
    subject: Subject
    agent: Path
    door: DoorSettings
    author: SuiteAuthor
    temp_root: Path
    results_base: Path
    runs: int | None = None
    concurrency: int = 4
    grants: frozenset[Operation] = HOSTED_GRANTS
    questions: tuple[tuple[str, bytes], ...] = ()
    subject_definition: bytes | None = None
    host: str | None = None
    limits: Limits = field(default_factory=Limits)
    hosted: bool = True
    extra_secrets: tuple[str, ...] = field(default=(), repr=False)
    #: Directories no run may see besides the temp root and `results_base` (the service's state).
    hidden: tuple[Path, ...] = ()
    stand_ins: frozenset[StandIn] = frozenset()
    #: Coder's defaults both arms admit (a marginal run), or None: the baseline admits nothing.
    defaults: AdoptedDefaults | None = None
    #: How to start an agent that is not the coder (`engine/agents`): the skills then go to it as files,
    #: and the programs, which only the coder runs, stay out. None: the coder child contract.
    adapter: AgentAdapter | None = None
    #: Whether the agent runs an extension's programs: only `coder` does (`testset.skills.PROGRAM_AGENT`).
    #: False (the built-in agent): none go in, as with an adapter, and the subject lock lists none.
    programs_run: bool = True
    #: Sentences the report's limitations add, e.g. that the extension's programs did not run
    #: (`testset.skills.programs_left_out`).
    extra_limitations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= 8:
            raise ValueError("--concurrency must be from 1 to 8")
        if self.runs is not None and not 1 <= self.runs <= 10:
            raise ValueError("runs must be from 1 to 10")

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.door.key, *self.extra_secrets)

    @property
    def programs_in(self) -> bool:
        """Whether the programs the arm admits go in: only for the coder child contract."""
        return self.adapter is None and self.programs_run


@dataclass(frozen=True, slots=True)
class PlannedAttempt:
    """One attempt of the plan: which case, which arm, which repeat."""

    index: int
    case: Case
    arm: Arm
    attempt: int


@dataclass(frozen=True, slots=True)
class Started:
    case: str
    arm: Arm
    attempt: int


@dataclass(frozen=True, slots=True)
class Finished:
    """An attempt that ran (a process started); `outcome` is its outcome words, e.g. `errored(timeout)`."""

    case: str
    arm: Arm
    attempt: int
    outcome: str
    seconds: float


ProgressEvent = Started | Finished
ProgressCallback = Callable[[ProgressEvent], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class SuiteOutcome:
    """A finished suite: the built report, where its results directory is, and whether it was stopped.
    `seconds` is the wall-clock time from the suite's start to its results directory written (runs,
    grading, report), when measured; `setup_seconds` the caller's own before it (the sandbox probe, the
    door), when it says."""

    built: BuiltReport
    results_dir: Path
    cancelled: bool
    seconds: float | None = None
    setup_seconds: float | None = None


def plan_attempts(suite: Suite, subject: Subject, runs: int | None) -> list[PlannedAttempt]:
    """Attempts in plan order (runner.md §13.2)."""
    operations = subject.operations()
    planned: list[PlannedAttempt] = []
    for case in suite.cases:
        repeats = runs if runs is not None else case.runs
        arms = [Arm.SUBJECT] if case.subject_only(operations) else [Arm.SUBJECT, Arm.BASELINE]
        for arm in arms:
            planned.extend(PlannedAttempt(len(planned) + n, case, arm, n + 1) for n in range(repeats))
    return planned


def planned_total(suite: Suite, runs: int) -> int:
    """What the phone is told is planned: cases × runs × 2, always (runner.md §13.2)."""
    return len(suite.cases) * runs * 2


def admitted(
    subject: Subject, arm: Arm, defaults: AdoptedDefaults | None = None
) -> tuple[tuple[Program, ...], tuple[Skill, ...]]:
    """The programs and skills `arm` admits: the subject's in the subject arm, nothing in the baseline,
    and with defaults the defaults' in both arms (runner.md §12)."""
    if defaults is not None:
        return defaults.admitted(subject if arm is Arm.SUBJECT else None)
    if arm is Arm.SUBJECT:
        return subject.programs, subject.skills
    return (), ()


def guidance(
    subject: Subject, case: Case, arm: Arm, defaults: AdoptedDefaults | None = None, *, skills_in: bool = True
) -> str | None:
    """The text appended to the agent's instructions (runner.md §13.4 step 4): the skills the arm admits
    (the subject's in the subject arm, the defaults' in both), then the case's instructions in both arms;
    None when there is nothing to append. `skills_in` False leaves the skills out: an agent that is not
    the coder gets them as files instead."""
    parts: list[str] = []
    _, skills = admitted(subject, arm, defaults)
    if skills and skills_in:
        lines = ["## Extension skills"]
        for skill in skills:
            digest = "sha256:" + hashlib.sha256(skill.data).hexdigest()
            text = skill.data.decode("utf-8", "replace").rstrip()
            lines += [f"### {skill.name} ({digest})", "", text, ""]
        parts.append("\n".join(lines))
    extra = case.run.append_instructions
    if extra is not None and extra.strip():
        parts.append(f"## Case instructions\n\n{extra}\n")
    return "\n".join(parts) if parts else None


def agent_pin(agent: Path, questions: Sequence[tuple[str, bytes]]) -> AgentPin:
    """The agent binary's digest and size, and its question sets' digests: what every lock pins."""
    data = agent.read_bytes()
    return AgentPin(
        digest=digest_bytes(data),
        size=len(data),
        questions=tuple(Question(name=name, digest=digest_bytes(body)) for name, body in questions),
    )


async def run_suite(
    plan: SuitePlan,
    *,
    confinement: Confinement | Unconfined,
    doors: Doors = NO_DOORS,
    on_progress: ProgressCallback | None = None,
    cancel: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> SuiteOutcome:
    """Run every planned attempt, grade it, and write the report and results directory."""
    stop = cancel or asyncio.Event()
    began = time.monotonic()
    started_at = int(clock())
    attempts = plan_attempts(plan.suite, plan.subject, plan.runs)
    done = await execute(plan, attempts, confinement=confinement, doors=doors, on_progress=on_progress, cancel=stop)
    outcome = await evaluate(
        plan,
        done,
        confinement=confinement,
        doors=doors,
        started_at=started_at,
        ended_at=max(started_at, int(clock())),
        cancelled=stop.is_set(),
    )
    return dataclasses.replace(outcome, seconds=time.monotonic() - began)


async def execute(
    plan: SuitePlan,
    attempts: Sequence[PlannedAttempt],
    *,
    confinement: Confinement | Unconfined,
    doors: Doors = NO_DOORS,
    on_progress: ProgressCallback | None = None,
    cancel: asyncio.Event | None = None,
) -> tuple[Attempt, ...]:
    """Run `attempts` at most `plan.concurrency` at a time, grading each as it ends; results in the order
    given. An attempt not started before `cancel` is set is recorded `cancelled`."""
    stop = cancel or asyncio.Event()
    operations = plan.subject.operations()
    slots = asyncio.Semaphore(plan.concurrency)
    door_setup = DoorSetup(coder=partial(DoorProxy, plan.door.url, plan.door.key))

    async def one(planned: PlannedAttempt) -> Attempt:
        async with slots:
            if stop.is_set():
                return _not_run(planned, RunEnd.CANCELLED)
            spec = _spec(plan, planned)
            if not isinstance(confinement, Unconfined):
                await _tell(on_progress, Started(planned.case.name, planned.arm, planned.attempt))
            record = await run_once(spec, confinement=confinement, door=door_setup, cancel=stop)
            try:
                graded_doors = doors if not stop.is_set() else NO_DOORS
                attempt = await _graded(planned, record, graded_doors, operations, patterns)
            finally:
                if record.workspace is not None:
                    await asyncio.to_thread(record.workspace.close)
            if not isinstance(confinement, Unconfined) and record.outcome.word != "cancelled":
                await _tell(
                    on_progress,
                    Finished(planned.case.name, planned.arm, planned.attempt, str(record.outcome), record.seconds),
                )
            return attempt

    async with PatternRunner() as patterns:  # one pattern worker for the whole suite, started if needed
        return tuple(await asyncio.gather(*(one(planned) for planned in attempts)))


async def evaluate(
    plan: SuitePlan,
    attempts: Sequence[Attempt],
    *,
    confinement: Confinement | Unconfined,
    doors: Doors,
    started_at: int,
    ended_at: int,
    cancelled: bool = False,
) -> SuiteOutcome:
    """Score the attempts against the plan, decide, and write the report and results directory. A planned
    attempt with no record in `attempts` is one nobody saw the end of: it is reported `unknown`."""
    pin = await asyncio.to_thread(agent_pin, plan.agent, plan.questions)
    limitation = receipt_limitation(plan.suite.cases)
    inputs = ReportInputs(
        suite=plan.suite,
        subject=plan.subject,
        agent=pin,
        attempts=tuple(attempts),
        gate_file=gate_file(),
        author=plan.author.author,
        package=plan.author.package,
        component=plan.author.component,
        evaluator=plan.author.evaluator,
        started_at=started_at,
        ended_at=ended_at,
        setup=RunSetup(
            runs=plan.runs,
            baseline=True,
            concurrency=plan.concurrency,
            grants=tuple(op.value for op in Operation if op in plan.grants),
            confinement=None if isinstance(confinement, Unconfined) else confinement.backend,
            door=plan.door.label,
            decision_door=None if doors.decision is None else "decision",
            judge_door=None if doors.judge is None else plan.door.label,
            hosted=plan.hosted,
        ),
        subject_definition=plan.subject_definition,
        subject_release=plan.author.subject_release,
        suite_release=plan.author.suite_release,
        requester=plan.author.requester,
        host=plan.host,
        partial=STOPPED_BY_OPERATOR if cancelled else None,
        extra_limitations=(*plan.extra_limitations, *(() if limitation is None else (limitation,))),
        stand_ins=plan.stand_ins,
        programs_in=plan.programs_in,
        defaults=None if plan.defaults is None else Defaults(plan.defaults.release, plan.defaults.lock_json()),
    )
    built = await asyncio.to_thread(build_report, inputs)
    results = await asyncio.to_thread(
        write_results, plan.results_base, built, built.attempts, suite_files(plan.suite), secrets=plan.secrets
    )
    return SuiteOutcome(built=built, results_dir=results, cancelled=cancelled)


async def _tell(on_progress: ProgressCallback | None, event: ProgressEvent) -> None:
    if on_progress is None:
        return
    result = on_progress(event)
    if result is not None:
        await result


def _spec(plan: SuitePlan, planned: PlannedAttempt) -> RunSpec:
    case = planned.case
    grants = frozenset({Operation.READ}) | (frozenset(case.run.allowed_operations) & plan.grants)
    programs, skills = admitted(plan.subject, planned.arm, plan.defaults)
    coder = plan.adapter is None
    return RunSpec(
        agent=plan.agent,
        prompt=case.prompt,
        model=plan.door.model,
        temp_root=plan.temp_root,
        fixtures=tuple((fixture.name, fixture.data) for fixture in case.fixtures),
        grants=grants,
        guidance=guidance(plan.subject, case, planned.arm, plan.defaults, skills_in=coder),
        programs=tuple((program.slug, program.data) for program in programs) if plan.programs_in else (),
        questions=plan.questions,
        env=case.run.env,
        deadline_seconds=float(case.run.deadline_seconds),
        secrets=plan.secrets,
        limits=plan.limits,
        hidden=(plan.results_base, *plan.hidden),
        adapter=plan.adapter,
        skills=() if coder else tuple(skills),
    )


async def _graded(
    planned: PlannedAttempt, record: RunRecord, doors: Doors, operations: frozenset[str], patterns: PatternRunner
) -> Attempt:
    outcome = record.outcome
    trajectory = _trajectory(record.trajectory)
    view = RunView(
        outcome=outcome.word,
        reason=outcome.reason,
        trajectory=trajectory,
        created_files=tuple(created.path for created in record.created),
        present_files=tuple(created.path for created in record.created if created.present),
        workspace=None if record.workspace is None else WorkspaceDirectory(record.workspace.path),
    )
    grades: RunGrades = await grade_run(planned.case, planned.arm, view, doors, operations, patterns=patterns)
    document = grades_bytes(
        planned.case.name,
        planned.arm,
        planned.attempt,
        view,
        grades,
        cost_usd=record.cost_usd,
        seconds=record.seconds,
    )
    return Attempt(
        case=planned.case.name,
        arm=planned.arm,
        attempt=planned.attempt,
        end=RunEnd(outcome.word),
        grades=document,
        reason=outcome.reason,
        score=grades.score,
        passed=grades.passed,
        seconds=record.seconds,
        cost_usd=record.cost_usd,
        stdout=record.stdout,
        stderr=record.stderr,
        trajectory=None if trajectory is None else trajectory.document_bytes(),
        created=tuple((created.path, created.data) for created in record.created),
        figures=run_figures(trajectory, record.door_usage),
    )


def _not_run(planned: PlannedAttempt, end: RunEnd) -> Attempt:
    view = RunView(outcome=end.value)
    return Attempt(
        case=planned.case.name,
        arm=planned.arm,
        attempt=planned.attempt,
        end=end,
        grades=grades_bytes(planned.case.name, planned.arm, planned.attempt, view, NOT_GRADED),
    )


def _trajectory(data: bytes | None) -> Trajectory | None:
    if not data:
        return None
    try:
        return parse_trajectory(data)
    except TrajectoryError:
        return None
