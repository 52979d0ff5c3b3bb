"""A complete report built the way the engine builds one: every document it names is written by our
builders, so a test of the report also exercises them. Keys are fixed labels' SHA-256 (throwaway)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from eval_runner.contracts.case_manifest import CaseManifest, case_manifest
from eval_runner.contracts.ext_eval import ExtEval, Headline, Identity, ProfileCase, Reliance
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.report import Arm, Counts, Coverage, MeasuredArm, Measurement, Report, Verdict
from eval_runner.contracts.report_documents import (
    AgentPin,
    ArmLock,
    Limitations,
    LockedFile,
    Outcome,
    Partition,
    Question,
    RunArm,
    RunEntry,
    RunsDocument,
    document_ref,
)
from eval_runner.contracts.strict_json import digest_bytes
from tests.support.reference_files import load, raw

AT = 1_790_000_000


def hex_of(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def blob(label: str, schema: str | None = None, media_type: str = "application/json") -> ArtifactRef:
    return ArtifactRef.of_bytes(label.encode(), media_type, schema)


SUITE_RELEASE = EventRef(id=hex_of("suite-release"), pubkey=hex_of("suite-author"), kind=3184)
SUBJECT_RELEASE = EventRef(id=hex_of("subject-release"), pubkey=hex_of("runner"), kind=3184)


@dataclass(frozen=True)
class Spec:
    """How a constructed report differs from the default hosted two-arm report."""

    evaluator: str = hex_of("runner")
    baseline: bool = True
    verdict: Verdict = Verdict.PASS
    requester: EventRef | None = None
    suite_release: EventRef | None = SUITE_RELEASE
    subject_release: EventRef | None = SUBJECT_RELEASE


def cases() -> CaseManifest:
    return CaseManifest.parse(load("eval-ext/eval-case/valid/two-cases.json"))


def subject_definition(spec: Spec) -> DefinitionRef:
    return DefinitionRef(
        id=f"{hex_of('runner')}:repo-map-brief/repo-map-brief",
        artifact=blob("package.json", "openagents.coder-package.v1"),
        event=spec.subject_release,
    )


def arms(spec: Spec) -> tuple[Arm, Arm | None]:
    agent = AgentPin(digest=digest_bytes(b"coder"), size=5, questions=(Question("route.json", digest_bytes(b"q")),))
    definition = subject_definition(spec)
    subject_lock = ArmLock(
        arm=RunArm.SUBJECT,
        agent=agent,
        definition=DefinitionRef(id=definition.id, artifact=definition.artifact),
        package={"publisher": hex_of("runner"), "slug": "repo-map-brief"},
        programs=(LockedFile("repo-map-brief", digest_bytes(b"program"), 7),),
        skills=(LockedFile("brief", digest_bytes(b"skill"), 5),),
    )
    configuration = "openagents.ext-eval-configuration.v1"
    subject = Arm(definition, subject_lock.ref()[1], blob("subject-configuration", configuration))
    if not spec.baseline:
        return subject, None
    baseline_lock = ArmLock(arm=RunArm.BASELINE, agent=agent)
    baseline_definition = DefinitionRef(
        id=f"{hex_of('suite-author')}:coder/coder", artifact=blob("agent", "openagents.ext-eval-agent.v1")
    )
    return subject, Arm(baseline_definition, baseline_lock.ref()[1], blob("baseline-configuration", configuration))


def report(spec: Spec | None = None) -> Report:
    spec = spec or Spec()
    manifest = cases()
    _, cases_ref = case_manifest(manifest.cases)
    gate = raw("gates/ext-eval-v2.json")
    suite_bytes, suite_ref = document_ref(
        {
            "v": "openagents.eval-suite.v1",
            "requires": [],
            "id": f"{hex_of('suite-author')}:repo-map-brief-tests/suite",
            "purpose": "operation",
            "cases": cases_ref.to_json(),
            "acceptance": {
                "id": f"{hex_of('suite-author')}:gym-gates/ext-eval-v2",
                "artifact": ArtifactRef.of_bytes(gate, "application/json", "openagents.gym.gate.v2").to_json(),
            },
        },
        "openagents.eval-suite.v1",
    )
    suite = ArtifactRef(
        digest=suite_ref.digest,
        size=len(suite_bytes),
        media_type="application/json",
        schema="openagents.eval-suite.v1",
        event=spec.suite_release,
    )
    ids = tuple(case.id for case in manifest.cases)
    arm_words = (RunArm.SUBJECT, RunArm.BASELINE) if spec.baseline else (RunArm.SUBJECT,)
    runs = RunsDocument(
        runs=tuple(
            RunEntry(arm, case, attempt, Outcome.COMPLETED, (), (blob(f"grades {arm} {case} {attempt}"),))
            for case in ids
            for arm in arm_words
            for attempt in (1, 2, 3)
        )
    )
    _, runs_ref = runs.ref()
    limitations = Limitations(("A suite written by the extension's author is not independent.",), None)
    counts = Counts(planned=2, attempted=6, completed=6, refused=0, failed=0, cancelled=0, unknown=0, excluded=0)
    evidence = (runs_ref,)
    measurements = [Measurement(MeasuredArm.SUBJECT, "cases_passed", 2, 2, 0, None, evidence)]
    measurements.append(Measurement(MeasuredArm.SUBJECT, "cost_usd", None, 6, 6, None, evidence))
    if spec.baseline:
        measurements.append(Measurement(MeasuredArm.BASELINE, "cases_passed", 1, 2, 0, None, evidence))
        measurements.append(Measurement(MeasuredArm.COMPARISON, "change", 0.5, 2, 0, None, evidence))
    subject, baseline = arms(spec)
    ext_eval = ExtEval(
        gate=digest_bytes(gate),
        cases=tuple(ProfileCase(case.id, case.kind) for case in manifest.cases),
        headline=Headline(subject_passed=2, baseline_passed=1 if spec.baseline else None, total=len(ids)),
        requester=spec.requester,
        reliance=Reliance(runner=spec.evaluator, host=digest_bytes(b"host"), door="default", agent="ext-eval@0.1.0"),
        identity=Identity.CONTENT,
    )
    return Report(
        suite=suite,
        partition=Partition(development=ids).ref()[1],
        subject=subject,
        baseline=baseline,
        evaluator=spec.evaluator,
        started_at=AT - 600,
        ended_at=AT - 60,
        runs=runs_ref,
        coverage=Coverage(subject=counts, baseline=counts if spec.baseline else None),
        measurements=tuple(measurements),
        verdict=spec.verdict,
        limitations=limitations.ref()[1],
        ext_eval=ext_eval,
    )
