"""Documents a report names, for the report-side contract tests: a run entry of runs.json and the subject's lock."""

from __future__ import annotations

from eval_runner.contracts.refs import DefinitionRef
from eval_runner.contracts.report_documents import (
    AgentPin,
    ArmLock,
    LockedFile,
    Outcome,
    RunArm,
    RunEntry,
)
from eval_runner.contracts.strict_json import digest_bytes
from tests.support.sample_reports import blob, hex_of


def entry(arm: RunArm = RunArm.SUBJECT, case: str = "map-repo", attempt: int = 1) -> RunEntry:
    return RunEntry(arm, case, attempt, Outcome.FAILED, (blob("receipt"),), (blob("atif", "ATIF-v1.8"), blob("g")))


AGENT = AgentPin(digest=digest_bytes(b"coder"), size=5)


def subject_lock() -> ArmLock:
    return ArmLock(
        arm=RunArm.SUBJECT,
        agent=AGENT,
        definition=DefinitionRef(id=f"{hex_of('p')}:demo/demo", artifact=blob("package.json")),
        package={"publisher": hex_of("p"), "slug": "demo"},
        programs=(LockedFile("demo", digest_bytes(b"program"), 7),),
    )
