"""The report: every run of a suite in; `report.json`, every document it names and `report.html` out.

A report is what a result, a seal and a publication point at by digest, so each document it names is built
here from one set of inputs in the reference's shapes (`ext-eval` `report::build`), and the report bytes
pass the reader (`contracts.report.report_ref`) before anyone sees them. Pure: the caller passes the
times, the host name and every attempt; `results_dir` writes them. Decisions: docs/decisions.md, "The
report and its results directory" and "One view of a report; stand-ins said".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.ext_eval import ExtEval, Headline, Identity, ProfileCase, Reliance
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.report import Arm, Counts, Coverage, Report, Verdict, report_ref
from eval_runner.contracts.report_documents import (
    ArmLock,
    Limitations,
    LockedFile,
    Outcome,
    RunArm,
    RunEntry,
    RunsDocument,
    document_ref,
)
from eval_runner.contracts.report_figures import META_KEY as FIGURES_KEY
from eval_runner.contracts.report_statistics import META_KEY as STATISTICS_KEY
from eval_runner.contracts.strict_json import JsonValue, digest_bytes, pretty, read
from eval_runner.engine.report.figures import arm_figures
from eval_runner.engine.report.html import ReportPage, RunLine, render
from eval_runner.engine.report.inputs import (
    GRADES_SCHEMA,
    Attempt,
    ReportInputs,
    RunEnd,
    grades_path,
    planned_cases,
    run_path,
    unknown_grades,
)
from eval_runner.engine.report.measurements import measurements, statistics
from eval_runner.engine.report.view import ReportView, stand_in_limitations, stand_ins_meta, view_of
from eval_runner.engine.run.trajectory import SCHEMA_VERSION as ATIF_SCHEMA
from eval_runner.engine.testset.documents import JSON_MEDIA, suite_documents
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.engine.verdict import scores as scoring
from eval_runner.engine.verdict.gate import Decision, Gate, GateError, decision
from eval_runner.engine.verdict.gate_digest import gate_digest
from eval_runner.engine.verdict.notes import hosted_notes
from eval_runner.engine.verdict.scores import Arm as RunSide
from eval_runner.engine.verdict.scores import ArmSummary, GradedRun, PlannedCase, ScoreError, Scores
from eval_runner.engine.verdict.statistics import Evidence, evidence, strata_of
from eval_runner.errors import EvalRunnerError

CONFIGURATION_SCHEMA = "openagents.ext-eval-configuration.v1"
AGENT_SCHEMA = "openagents.ext-eval-agent.v1"
RUN_SCHEMA = "openagents.ext-eval-run.v1"
#: The three sentences every report's limitations open with (the reference's words).
FIXED_LIMITATIONS = (
    "A suite written by an extension's author describes intended behavior; it is not independent evidence.",
    "Trajectories stay private; the report carries their digests.",
    "Metric aggregations are named ext-eval.v1 operations, not DefinitionRefs.",
)
NO_BASELINE = "No baseline arm ran, so the report claims no change."
DIFFERENT_DOORS = "The subject and baseline arms used different doors."
STATISTICS_LEFT_OUT = (
    "The statistics beside the verdict were left out to keep the report within a reader's limits; "
    "report.html still shows them."
)


class ReportError(EvalRunnerError):
    """Inputs a report cannot be built from; the message says which input and why."""


@dataclass(frozen=True, slots=True)
class BuiltReport:
    """A built report: the record, its JCS bytes and reference, every document under `artifacts/` by
    relative path, `run.json`, `report.html`, what they were concluded from, and the view every reader
    shows (`engine.report.view`)."""

    report: Report
    report_bytes: bytes
    report_ref: ArtifactRef
    artifacts: dict[str, bytes]
    run_json: bytes
    html: bytes
    scores: Scores
    decision: Decision
    evidence: Evidence | None
    notes: tuple[str, ...]
    limitations: Limitations
    gate_digest: str
    attempts: tuple[Attempt, ...]
    view: ReportView

    @property
    def verdict(self) -> Verdict:
        return self.report.verdict


# --- building --------------------------------------------------------------------------------------


def build_report(inputs: ReportInputs) -> BuiltReport:
    """Score the attempts, decide the verdict, and build the report with every document it names.

    Raises:
        ReportError: attempts that do not fit the plan, a gate file that is not an `ext-eval-v2`-shaped
            rule, subject definition bytes that are not the definition's, or a report a reader would
            refuse even without the statistics.
    """
    setup = inputs.setup
    gate_value = _gate(inputs.gate_file)
    try:
        digest = gate_digest(inputs.gate_file)
    except GateError as error:
        raise ReportError(str(error)) from None
    attempts = _complete(inputs, planned_cases(inputs))
    scores = _score(inputs, attempts)
    decided = decision(scores.comparison, gate_value)
    found = evidence(strata_of(scores)) if setup.baseline else None
    notes = hosted_notes(scores.comparison)
    artifacts: dict[str, bytes] = {}

    try:
        documents = suite_documents(
            inputs.suite,
            author=inputs.author,
            package=inputs.package,
            component=inputs.component,
            gate_file=inputs.gate_file,
            engine=f"ext-eval {inputs.engine_version}",
            suite_release=inputs.suite_release,
        )
    except TestSetError as error:
        raise ReportError(str(error)) from None
    artifacts.update(documents.files)
    artifacts["gate.json"] = inputs.gate_file

    runs_ref = _runs_document(attempts, artifacts)
    subject_arm, baseline_arm, subject_lock = _arms(inputs, gate_value.id, artifacts)
    base_limitations = _limitations(inputs, scores)
    partial = _partial(inputs, scores)
    coverage = Coverage(
        subject=_counts(scores.subject),
        baseline=None if scores.baseline is None else _counts(scores.baseline),
    )
    ext_eval = _ext_eval(inputs, scores, digest)
    stats = statistics(scores, found, runs_ref) if found is not None else None
    rows = measurements(scores, runs_ref)
    marked = {**stand_ins_meta(inputs.stand_ins), FIGURES_KEY: arm_figures(attempts).to_json()}
    candidates: list[tuple[dict[str, JsonValue], tuple[str, ...]]] = [
        ({**marked} if stats is None else {**marked, STATISTICS_KEY: stats.to_json()}, base_limitations)
    ]
    if stats is not None:
        candidates.append(({**marked}, (*base_limitations, STATISTICS_LEFT_OUT)))
    last_error: ContractError | None = None
    for meta_extra, limitations in candidates:
        try:
            limits = Limitations(limitations, partial)
            limitations_bytes, limitations_ref = limits.ref()
            report = Report(
                suite=documents.suite,
                partition=documents.partition,
                subject=subject_arm,
                baseline=baseline_arm,
                evaluator=inputs.evaluator,
                started_at=inputs.started_at,
                ended_at=inputs.ended_at,
                runs=runs_ref,
                coverage=coverage,
                measurements=rows,
                verdict=Verdict(decided.verdict.value),
                limitations=limitations_ref,
                ext_eval=ext_eval,
                meta_extra=meta_extra,
            )
            report_bytes, ref = report_ref(report)
        except ContractError as error:
            if error.code is not Code.LIMIT_EXCEEDED:
                raise ReportError(f"the report does not check: {error.detail}") from None
            last_error = error
            continue
        artifacts["limitations.json"] = limitations_bytes
        view = view_of(
            report,
            notes=notes,
            limitations=limits.limitations,
            partial=limits.partial,
            evidence=found,
            rounds=scores.comparison,
        )
        page = _page(inputs, view, gate_value.id, decided, digest, ref, attempts, documents.suite)
        return BuiltReport(
            report=report,
            report_bytes=report_bytes,
            report_ref=ref,
            artifacts=artifacts,
            run_json=_run_json(inputs, subject_lock, report.verdict, partial),
            html=render(page).encode("utf-8"),
            scores=scores,
            decision=decided,
            evidence=found,
            notes=notes,
            limitations=limits,
            gate_digest=digest,
            attempts=attempts,
            view=view,
        )
    detail = "" if last_error is None else f": {last_error.detail}"
    raise ReportError(f"the report is beyond what a reader accepts{detail}")


def _gate(gate_file: bytes) -> Gate:
    try:
        value = read(gate_file)
        if not isinstance(value, dict):
            raise ReportError("the gate file is not a JSON object")
        return Gate.from_document(value)
    except ContractError as error:
        raise ReportError(f"the gate file is not JSON: {error.detail}") from None
    except GateError as error:
        raise ReportError(str(error)) from None


def _complete(inputs: ReportInputs, plan: Sequence[PlannedCase]) -> tuple[Attempt, ...]:
    """Every planned attempt in plan order; the caller's records, or `unknown` where there is none."""
    by_key: dict[tuple[str, RunSide, int], Attempt] = {}
    for attempt in inputs.attempts:
        if attempt.key in by_key:
            raise ReportError(f"two records of {attempt.case}, {attempt.arm} arm, attempt {attempt.attempt}")
        by_key[attempt.key] = attempt
    ordered: list[Attempt] = []
    for case in plan:
        arms = (RunSide.SUBJECT,) if case.subject_only or not inputs.setup.baseline else tuple(RunSide)
        for arm in arms:
            for number in range(1, case.runs + 1):
                found = by_key.pop((case.id, arm, number), None)
                if found is None:
                    found = Attempt(case.id, arm, number, RunEnd.UNKNOWN, unknown_grades(case.id, arm, number))
                ordered.append(found)
    if by_key:
        stray = next(iter(by_key.values()))
        raise ReportError(f"a run of {stray.case} in the {stray.arm} arm, attempt {stray.attempt}, is not in the plan")
    return tuple(ordered)


def _score(inputs: ReportInputs, attempts: Sequence[Attempt]) -> Scores:
    plan = planned_cases(inputs)
    kinds = {case.id: case.kind for case in plan}
    try:
        graded = [
            GradedRun(
                case=attempt.case,
                kind=kinds[attempt.case],
                arm=attempt.arm,
                attempt=attempt.attempt,
                outcome=attempt.coverage_word,
                score=attempt.score,
                passed=attempt.passed,
                cost_usd=scoring.measured(attempt.cost_usd),
                seconds=scoring.measured(attempt.seconds),
            )
            for attempt in attempts
        ]
        return scoring.score_suite(plan, graded, baseline=inputs.setup.baseline)
    except ScoreError as error:
        raise ReportError(str(error)) from None


def _runs_document(attempts: Sequence[Attempt], artifacts: dict[str, bytes]) -> ArtifactRef:
    """`runs.json` and each run's grades document; every attempt, in plan order."""
    entries = []
    for attempt in attempts:
        name = grades_path(attempt.case, attempt.arm, attempt.attempt)
        artifacts[name] = attempt.grades
        refs = [ArtifactRef.of_bytes(attempt.grades, JSON_MEDIA, GRADES_SCHEMA)]
        if attempt.trajectory is not None:
            refs.insert(0, ArtifactRef.of_bytes(attempt.trajectory, JSON_MEDIA, ATIF_SCHEMA))
        entries.append(
            RunEntry(
                arm=RunArm(attempt.arm.value),
                case=attempt.case,
                attempt=attempt.attempt,
                outcome=Outcome(attempt.coverage_word.value),
                receipts=attempt.receipts,
                artifacts=tuple(refs),
            )
        )
    try:
        data, ref = RunsDocument(tuple(entries)).ref()
    except ContractError as error:
        raise ReportError(f"the runs document does not check: {error.detail}") from None
    artifacts["runs.json"] = data
    return ref


def _arms(inputs: ReportInputs, gate_id: str, artifacts: dict[str, bytes]) -> tuple[Arm, Arm | None, ArmLock]:
    """Both arms' definitions, locks and configurations; the subject lock as `run.json` names it."""
    subject = inputs.subject
    defaults_lock = None if inputs.defaults is None else inputs.defaults.lock
    lock = ArmLock(
        arm=RunArm.SUBJECT,
        agent=inputs.agent,
        definition=subject.definition,
        package=subject.package_lock,
        # Only the programs that went in: none when the agent runs none (decisions.md, "Programs left out").
        programs=tuple(LockedFile(p.slug, digest_bytes(p.data), len(p.data)) for p in subject.programs)
        if inputs.programs_in
        else (),
        skills=tuple(LockedFile(s.name, digest_bytes(s.data), len(s.data)) for s in subject.skills),
        defaults=defaults_lock,
    )
    artifacts["subject-lock.json"], subject_lock_ref = _checked(lock.ref, "the subject lock")
    definition = subject.definition
    if inputs.subject_definition is not None:
        if not definition.artifact.matches(inputs.subject_definition):
            raise ReportError("the subject definition's bytes are not the ones its DefinitionRef names")
        artifacts["subject-definition.json"] = inputs.subject_definition
    event = inputs.subject_release or definition.event
    subject_arm = Arm(
        definition=DefinitionRef(definition.id, definition.artifact, event),
        lock=subject_lock_ref,
        configuration=_configuration(inputs, RunSide.SUBJECT, gate_id, artifacts),
    )
    if not inputs.setup.baseline:
        return subject_arm, None, lock
    agent_bytes, agent_ref = document_ref(
        {"v": AGENT_SCHEMA, "requires": [], "agent": "coder", "binary": inputs.agent.to_json()}, AGENT_SCHEMA
    )
    artifacts["baseline-agent.json"] = agent_bytes
    baseline_lock = ArmLock(arm=RunArm.BASELINE, agent=inputs.agent, defaults=defaults_lock)
    artifacts["baseline-lock.json"], baseline_lock_ref = _checked(baseline_lock.ref, "the baseline lock")
    try:
        baseline_definition = DefinitionRef.parse(
            {"id": f"{inputs.author}:coder/coder", "artifact": agent_ref.to_json()}, "baseline.definition"
        )
    except ContractError as error:
        raise ReportError(f"the suite author cannot name the baseline: {error.detail}") from None
    baseline_arm = Arm(
        definition=baseline_definition,
        lock=baseline_lock_ref,
        configuration=_configuration(inputs, RunSide.BASELINE, gate_id, artifacts),
    )
    return subject_arm, baseline_arm, lock


def _checked(build: Callable[[], tuple[bytes, ArtifactRef]], what: str) -> tuple[bytes, ArtifactRef]:
    try:
        data, ref = build()
    except ContractError as error:
        raise ReportError(f"{what} does not check: {error.detail}") from None
    return data, ref


def _configuration(inputs: ReportInputs, arm: RunSide, gate_id: str, artifacts: dict[str, bytes]) -> ArtifactRef:
    """`<arm>-configuration.json`: the arm's door, the graders' doors and the run options (§13.11)."""
    setup = inputs.setup
    door = setup.door if arm is RunSide.SUBJECT else (setup.baseline_door or setup.door)
    run: dict[str, JsonValue] = {
        "agent": "coder -p",
        "arm": arm.value,
        "grants": list(setup.grants),
        "network": setup.network,
        "confinement": setup.confinement,
        "runs": setup.runs,
        "baseline": setup.baseline,
        "concurrency": setup.concurrency,
        "classifier": setup.decision_door is not None,
        "gate": gate_id,
        "defaults": None if inputs.defaults is None else inputs.defaults.release.to_json(),
    }
    value: dict[str, JsonValue] = {
        "v": CONFIGURATION_SCHEMA,
        "requires": [],
        "arm": arm.value,
        "door": door,
        "decision_door": setup.decision_door,
        "judge_door": setup.judge_door,
        "run": run,
    }
    data, ref = document_ref(value, CONFIGURATION_SCHEMA)
    artifacts[f"{arm.value}-configuration.json"] = data
    return ref


def _limitations(inputs: ReportInputs, scores: Scores) -> tuple[str, ...]:
    setup = inputs.setup
    out = [*FIXED_LIMITATIONS, *stand_in_limitations(inputs.stand_ins)]
    if not setup.baseline:
        out.append(NO_BASELINE)
    excluded = scores.subject_only_cases
    if excluded:
        out.append(f"Scored with the extension only and excluded from the change: {', '.join(excluded)}.")
    if setup.runs is not None:
        out.append(f"Every case ran {setup.runs} times per arm, overriding the cases' runs.")
    if setup.baseline and (setup.baseline_door or setup.door) != setup.door:
        out.append(DIFFERENT_DOORS)
    out.extend(sentence for sentence in inputs.extra_limitations if sentence not in out)
    return tuple(out)


def _partial(inputs: ReportInputs, scores: Scores) -> str | None:
    """The run's own reason, else how many runs did not finish (cancelled and unknown, both arms)."""
    if inputs.partial is not None:
        return inputs.partial
    unfinished = sum(
        summary.coverage.cancelled + summary.coverage.unknown
        for summary in (scores.subject, scores.baseline)
        if summary is not None
    )
    if unfinished == 0:
        return None
    return "1 run did not finish" if unfinished == 1 else f"{unfinished} runs did not finish"


def _counts(summary: ArmSummary) -> Counts:
    c = summary.coverage
    return Counts(c.planned, c.attempted, c.completed, c.refused, c.failed, c.cancelled, c.unknown, c.excluded)


def _ext_eval(inputs: ReportInputs, scores: Scores, digest: str) -> ExtEval:
    setup = inputs.setup
    engine = f"ext-eval@{inputs.engine_version}"
    return ExtEval(
        gate=digest,
        cases=tuple(ProfileCase(case.name, case.kind) for case in inputs.suite.cases),
        headline=Headline(
            subject_passed=scores.subject.cases_passed,
            baseline_passed=None if scores.baseline is None else scores.baseline.cases_passed,
            total=len(inputs.suite.cases),
        ),
        requester=inputs.requester,
        reliance=Reliance(
            runner=inputs.evaluator if setup.hosted else None,
            host=None if inputs.host is None else digest_bytes(inputs.host.encode("utf-8")),
            door=setup.door,
            model=None,
            agent=engine,
            selector=setup.decision_door,
            graders=engine,
        ),
        identity=Identity.CONTENT,
        defaults=None if inputs.defaults is None else inputs.defaults.release,
    )


def _run_json(inputs: ReportInputs, lock: ArmLock, verdict: Verdict, partial: str | None) -> bytes:
    """`run.json` (`openagents.ext-eval-run.v1`): the runner's own record of the run (§13.11)."""
    setup = inputs.setup
    plain = ArmLock(
        arm=lock.arm,
        agent=lock.agent,
        definition=lock.definition,
        package=lock.package,
        programs=lock.programs,
        skills=lock.skills,
    )
    subject_lock, _ = _checked(plain.ref, "the subject lock")
    return pretty(
        {
            "v": RUN_SCHEMA,
            "requires": [],
            "author": inputs.author,
            "package": inputs.package,
            "component": inputs.component,
            "evaluator": inputs.evaluator,
            "subject": inputs.subject.slug,
            "subject_definition": inputs.subject.definition.to_json(),
            "subject_lock": subject_lock.decode("utf-8"),
            "door": setup.door,
            "agent": {"digest": inputs.agent.digest, "size": inputs.agent.size},
            "runs": setup.runs,
            "baseline": setup.baseline,
            "grants": list(setup.grants),
            "verdict": verdict.value,
            "partial": partial,
        }
    )


def _page(
    inputs: ReportInputs,
    view: ReportView,
    gate_id: str,
    decided: Decision,
    digest: str,
    ref: ArtifactRef,
    attempts: Sequence[Attempt],
    suite_ref: ArtifactRef,
) -> ReportPage:
    runs = tuple(
        (
            case.id,
            tuple(
                RunLine(
                    arm=a.arm,
                    attempt=a.attempt,
                    outcome=a.coverage_word.value,
                    reason=a.reason,
                    passed=a.passed,
                    score=a.score,
                    cost_usd=a.cost_usd,
                    seconds=a.seconds,
                    figures=a.figures,
                    trajectory=None
                    if a.trajectory is None
                    else f"{run_path(a.case, a.arm, a.attempt)}/trajectory.json",
                )
                for a in attempts
                if a.case == case.id
            ),
        )
        for case in view.cases
    )
    return ReportPage(
        view=view,
        subject=inputs.subject.definition.id,
        suite=f"{inputs.author}:{inputs.package}/{inputs.component}",
        evaluator=inputs.evaluator,
        report_digest=ref.digest,
        suite_digest=suite_ref.digest,
        gate_id=gate_id,
        gate_digest=digest,
        criteria=decided.criteria,
        runs=runs,
    )
