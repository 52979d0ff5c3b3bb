"""The suites the pipeline runs: the `SuiteRunner` protocol it depends on, and the engine's runner behind it.

The pipeline knows only `SuiteRunner` (a test stands one in); `EngineSuiteRunner` is the one `serve` hands
it: per admitted plan it builds the engine's `SuitePlan` from the plan and the configuration, runs it in
the engine's sandboxes, and maps what ends to a `SuiteResult` (anything the engine raises becomes
`SuiteError`, so the run fails plainly and its quota is given back).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from eval_runner import stand_ins
from eval_runner.contracts.outputs import Headline
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.engine.agents import adapter_for
from eval_runner.engine.grade.doors import DoorApi, JevDecisionDoor, decision_pin, judge_door
from eval_runner.engine.grade.votes import Doors
from eval_runner.engine.report.build import BuiltReport
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.run.sandbox import Confinement, Limits, Unconfined
from eval_runner.engine.suite_run import (
    DoorSettings,
    Finished,
    ProgressEvent,
    Started,
    SuiteAuthor,
    SuitePlan,
    run_suite,
)
from eval_runner.engine.testset.skills import PROGRAM_AGENT, programs_left_out
from eval_runner.errors import EvalRunnerError
from eval_runner.service.config import Config
from eval_runner.service.metrics import NO_METRICS, Metrics
from eval_runner.service.requests.admission import RunPlan
from eval_runner.service.settings import DecisionPin, JevDoorKind, os_error_text

# --- what the pipeline depends on ---------------------------------------------------------------------


class SuiteError(EvalRunnerError):
    """The suite errored: the run fails (`failed`, the first 400 characters of `str()`), the quota is given back."""


@dataclass(frozen=True, slots=True)
class SuiteResult:
    """What a finished suite run hands back (runner.md §14 step 7).

    `report` is the report's JCS bytes and `report_ref` their ArtifactRef (`application/json`,
    `openagents.eval-report.v1`); `headline`, `verdict` (`pass`/`fail`/`inconclusive`) and `notes`
    (≤ 4 of ≤ 200 characters) are what the result shows; `results` the results directory, if one was
    made; `cancelled` whether the run stopped on the cancel switch.
    """

    report: bytes
    report_ref: ArtifactRef
    headline: Headline
    verdict: str
    notes: tuple[str, ...] = ()
    results: Path | None = None
    cancelled: bool = False

    @classmethod
    def of(cls, built: BuiltReport, results: Path | None, *, cancelled: bool = False) -> SuiteResult:
        """What a run hands back for the report it built and the results directory it left."""
        headline = built.report.ext_eval.headline
        return cls(
            report=built.report_bytes,
            report_ref=built.report_ref,
            headline=Headline(headline.subject_passed, headline.baseline_passed, headline.total),
            verdict=built.verdict.value,
            notes=built.notes,
            results=results,
            cancelled=cancelled,
        )


Progress = Callable[[int], Awaitable[None] | None]


class SuiteRunner(Protocol):
    """Runs a plan's suite in both arms. `progress(completed)` is called once per finished case run
    (1, 2, … up to the plan's turns); `cancel` is the stop switch; the engine makes its results directory
    under `results_base`. Raises `SuiteError` when the suite errors."""

    async def run(
        self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path
    ) -> SuiteResult: ...


# --- the engine's runner ------------------------------------------------------------------------------

QUESTION_SUFFIX: Final = ".json"


class QuestionsError(EvalRunnerError):
    """The question sets could not be read (`EVAL_RUNNER_QUESTIONS`); `str()` names the file."""


def load_questions(directory: Path | None) -> tuple[tuple[str, bytes], ...]:
    """Every regular `*.json` file directly in `directory`, sorted by path, as (file name, bytes)
    (runner.md §6 step 2). None (the variable unset) is no question sets."""
    if directory is None:
        return ()
    try:
        paths = sorted(path for path in directory.iterdir() if path.suffix == QUESTION_SUFFIX and path.is_file())
        return tuple((path.name, path.read_bytes()) for path in paths)
    except OSError as error:
        where = error.filename if error.filename is not None else directory
        raise QuestionsError(f"EVAL_RUNNER_QUESTIONS {where}: {os_error_text(error)}") from None


def decision_door(pin: DecisionPin | None) -> JevDecisionDoor | None:
    """The decision door of the configuration's pin (runner.md §2.2), or None without one."""
    if pin is None:
        return None
    keys = {door.kind: door.key.expose() for door in pin.doors}
    return decision_pin(
        keys[JevDoorKind.TYPESAFE],
        typesafe_url=pin.typesafe.door,
        gateway_key=keys.get(JevDoorKind.GATEWAY),
        openrouter_key=keys.get(JevDoorKind.OPENROUTER),
    )


class EngineSuiteRunner:
    """Runs admitted plans in the engine's sandboxes (the `SuiteRunner` the pipeline calls)."""

    def __init__(
        self,
        config: Config,
        *,
        confinement: Confinement | Unconfined,
        questions: tuple[tuple[str, bytes], ...],
        extra_secrets: tuple[str, ...] = (),
        doors: Doors | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.confinement = confinement
        self.questions = questions
        self._secrets = tuple(dict.fromkeys((*config.secrets(), *extra_secrets)))
        door = config.door
        self.door = DoorSettings(door.url, door.key.expose(), door.model)
        if doors is None:
            # The judge speaks the door's API: Anthropic Messages for Claude Code's door, else Responses.
            anthropic = config.agent is not None and config.agent.anthropic_door
            api = DoorApi.ANTHROPIC if anthropic else DoorApi.RESPONSES
            doors = Doors(
                decision=decision_door(config.decision),
                judge=judge_door(api, door.url, door.key.expose(), door.model),
            )
        self.doors = doors

    def suite_plan(self, plan: RunPlan, results_base: Path) -> SuitePlan:
        """The engine's plan for an admitted run. An agent that is not `coder` gets the subject's skills and
        not its programs, and the report's limitations say so."""
        authorship = plan.authorship
        left_out = programs_left_out([program.slug for program in plan.subject.programs], self.agent_kind)
        return SuitePlan(
            suite=plan.suite,
            subject=plan.subject,
            agent=self.config.coder,
            door=self.door,
            author=SuiteAuthor(
                author=authorship.author,
                package=authorship.package,
                component=authorship.component,
                evaluator=authorship.evaluator,
                suite_release=authorship.suite_release,
                subject_release=plan.subject.definition.event,
                requester=authorship.requester,
            ),
            temp_root=self.config.temp_root,
            results_base=results_base,
            runs=plan.runs,
            concurrency=self.config.limits.concurrency,
            questions=self.questions,
            subject_definition=None if plan.tool is None else plan.tool.record,
            host=self.config.hostname,
            hosted=True,
            extra_secrets=tuple(secret for secret in self._secrets if secret != self.door.key),
            hidden=(self.config.state,),
            limits=Limits(disk=self.config.disk.run),
            stand_ins=self.stand_ins(),
            defaults=plan.defaults,
            adapter=None if self.config.agent is None else adapter_for(self.config.agent, self.config.coder),
            programs_run=self.agent_kind == PROGRAM_AGENT,
            extra_limitations=() if left_out is None else (left_out.limitation,),
        )

    @property
    def agent_kind(self) -> str:
        """The configured agent's kind (`EVAL_RUNNER_AGENT`): `coder` when none is configured."""
        return PROGRAM_AGENT if self.config.agent is None else self.config.agent.kind.value

    def stand_ins(self) -> frozenset[StandIn]:
        """The parts of this runner's runs that are stand-ins, which every report then says."""
        found = {StandIn.DOOR} if self.config.stand_in_door else set()
        try:
            if os.path.samefile(self.config.coder, stand_ins.AGENT):
                found.add(StandIn.AGENT)
        except OSError:
            pass
        return frozenset(found)

    async def run(self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path) -> SuiteResult:
        finished = live = 0

        async def on_progress(event: ProgressEvent) -> None:
            nonlocal finished, live
            live += self._running(event)
            if isinstance(event, Finished):
                finished += 1
                step = progress(finished)
                if step is not None:
                    await step

        try:
            outcome = await run_suite(
                self.suite_plan(plan, results_base),
                confinement=self.confinement,
                doors=self.doors,
                on_progress=on_progress,
                cancel=cancel,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the engine's typed errors and anything else: the run fails, plainly
            raise SuiteError(_plain(error)) from error
        finally:
            self.metrics.turns_running(-live)  # attempts cut off by a cancel never say Finished
        return SuiteResult.of(outcome.built, outcome.results_dir, cancelled=outcome.cancelled)

    def _running(self, event: ProgressEvent) -> int:
        """Run slots in use: +1 when an attempt starts, -1 when it has finished (graded)."""
        delta = 1 if isinstance(event, Started) else -1
        self.metrics.turns_running(delta)
        return delta


def _plain(error: Exception) -> str:
    text = str(error)
    return text if text else type(error).__name__
