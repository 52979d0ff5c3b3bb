"""The report `openagents.eval-report.v1` under the extension-evaluation profile (wire.md §13.1).

The report is the one document every other piece points at: the 26920 result and the 3188 envelope name
it by digest, and a 3189 publication carries its exact bytes. So the parser is the reader's contract (the
rules and codes of `crates/nostr` `eval_ext::parse_report`; decisions.md, "Report-side contracts"), and
the writer goes through it: `report_ref` re-encodes a record as JCS and refuses to name bytes a reader
would refuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.ext_eval import RELEASE_KIND, ExtEval
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read

REPORT_SCHEMA = "openagents.eval-report.v1"
SUITE_SCHEMA = "openagents.eval-suite.v1"
#: Readers refuse larger reports; a 3189 carries at most this many bytes inline.
MAX_REPORT_BYTES = 65_536
MAX_MEASUREMENTS = 1_024
MAX_METRIC_BYTES = 128
#: A published subject is a NIP-EXT release or a NIP-CAP decision-service head.
SUBJECT_KINDS = (RELEASE_KIND, 30180)

_KEYS = (
    "v",
    "requires",
    "suite",
    "partition",
    "subject",
    "baseline",
    "evaluator",
    "started_at",
    "ended_at",
    "runs",
    "coverage",
    "measurements",
    "verdict",
    "limitations",
    "meta",
)
COUNT_KEYS = ("planned", "attempted", "completed", "refused", "failed", "cancelled", "unknown", "excluded")


class Verdict(StrEnum):
    PASS = "pass"  # noqa: S105 (a verdict word, not a password)
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class MeasuredArm(StrEnum):
    """Which arm a measurement describes; `comparison` is the subject-minus-baseline estimate."""

    SUBJECT = "subject"
    BASELINE = "baseline"
    COMPARISON = "comparison"


def _unsupported_word(value: JsonValue, path: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise shape.fail(path, "must be a string")
    return shape.choice(value, path, options, Code.UNSUPPORTED_FEATURE)


@dataclass(frozen=True, slots=True)
class Arm:
    """What one arm ran: its definition, the run lock it held, and its configuration."""

    definition: DefinitionRef
    lock: ArtifactRef
    configuration: ArtifactRef

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Arm:
        found = shape.closed(value, path, ("definition", "lock", "configuration"), unknown=Code.UNSUPPORTED_FEATURE)
        return cls(
            definition=DefinitionRef.parse(found["definition"], shape.at(path, "definition")),
            lock=ArtifactRef.parse(found["lock"], shape.at(path, "lock")),
            configuration=ArtifactRef.parse(found["configuration"], shape.at(path, "configuration")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "definition": self.definition.to_json(),
            "lock": self.lock.to_json(),
            "configuration": self.configuration.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Counts:
    """One arm's coverage: planned/excluded count cases, the rest count attempts."""

    planned: int
    attempted: int
    completed: int
    refused: int
    failed: int
    cancelled: int
    unknown: int
    excluded: int

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Counts:
        found = shape.closed(value, path, COUNT_KEYS, unknown=Code.UNSUPPORTED_FEATURE)
        counts = cls(**{key: shape.integer(found[key], shape.at(path, key), low=0) for key in COUNT_KEYS})
        terminal = counts.completed + counts.refused + counts.failed + counts.cancelled + counts.unknown
        if terminal != counts.attempted:
            raise shape.fail(
                path,
                f"the five outcome counts sum to {terminal}, not the {counts.attempted} attempted",
                Code.IDENTITY_MISMATCH,
            )
        return counts

    def to_json(self) -> dict[str, JsonValue]:
        return {key: getattr(self, key) for key in COUNT_KEYS}


@dataclass(frozen=True, slots=True)
class Coverage:
    subject: Counts
    baseline: Counts | None

    @classmethod
    def parse(cls, value: JsonValue, path: str, *, has_baseline: bool) -> Coverage:
        found = shape.closed(value, path, ("subject", "baseline"), unknown=Code.UNSUPPORTED_FEATURE)
        subject = Counts.parse(found["subject"], shape.at(path, "subject"))
        baseline_path = shape.at(path, "baseline")
        if (found["baseline"] is None) == has_baseline:
            raise shape.fail(
                baseline_path, "must be null exactly when the report has no baseline", Code.IDENTITY_MISMATCH
            )
        baseline = None if found["baseline"] is None else Counts.parse(found["baseline"], baseline_path)
        return cls(subject=subject, baseline=baseline)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "subject": self.subject.to_json(),
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Measurement:
    arm: MeasuredArm
    metric: str
    #: A finite number, or None when unmeasured (never a fabricated zero).
    value: int | float | None
    denominator: int
    unknown_count: int
    uncertainty: ArtifactRef | None
    evidence: tuple[ArtifactRef, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str, *, has_baseline: bool) -> Measurement:
        keys = ("arm", "metric", "value", "denominator", "unknown_count", "uncertainty", "evidence")
        found = shape.closed(value, path, keys, unknown=Code.UNSUPPORTED_FEATURE)
        arm = MeasuredArm(_unsupported_word(found["arm"], shape.at(path, "arm"), tuple(MeasuredArm)))
        if arm is not MeasuredArm.SUBJECT and not has_baseline:
            raise shape.fail(shape.at(path, "arm"), f"there is no baseline to measure {arm}", Code.IDENTITY_MISMATCH)
        metric = found["metric"]
        metric_path = shape.at(path, "metric")
        if not isinstance(metric, str) or not 1 <= len(metric.encode("utf-8", "surrogatepass")) <= MAX_METRIC_BYTES:
            raise shape.fail(metric_path, f"must be a string of 1–{MAX_METRIC_BYTES} bytes")
        number = found["value"]
        if number is not None:
            number = shape.number(number, shape.at(path, "value"))
            if not math.isfinite(number):
                raise shape.fail(shape.at(path, "value"), "must be finite")
        uncertainty = found["uncertainty"]
        if uncertainty is not None:
            uncertainty = ArtifactRef.parse(uncertainty, shape.at(path, "uncertainty"))
        return cls(
            arm=arm,
            metric=metric,
            value=number,
            denominator=shape.integer(found["denominator"], shape.at(path, "denominator"), low=0),
            unknown_count=shape.integer(found["unknown_count"], shape.at(path, "unknown_count"), low=0),
            uncertainty=uncertainty,
            evidence=tuple(
                ArtifactRef.parse(item, item_path)
                for item_path, item in shape.indexed(found["evidence"], shape.at(path, "evidence"))
            ),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "arm": self.arm.value,
            "metric": self.metric,
            "value": self.value,
            "denominator": self.denominator,
            "unknown_count": self.unknown_count,
            "uncertainty": None if self.uncertainty is None else self.uncertainty.to_json(),
            "evidence": [item.to_json() for item in self.evidence],
        }


@dataclass(frozen=True, slots=True)
class Report:
    """A checked report. `meta_extra` holds the inert meta keys besides `ext_eval`, kept for the bytes."""

    suite: ArtifactRef
    partition: ArtifactRef
    subject: Arm
    baseline: Arm | None
    evaluator: str
    started_at: int
    ended_at: int
    runs: ArtifactRef
    coverage: Coverage
    measurements: tuple[Measurement, ...]
    verdict: Verdict
    limitations: ArtifactRef
    ext_eval: ExtEval
    meta_extra: dict[str, JsonValue] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Report:
        found = shape.closed(value, path, _KEYS, unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), REPORT_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        suite = _suite(found["suite"], shape.at(path, "suite"))
        partition = ArtifactRef.parse(found["partition"], shape.at(path, "partition"))
        runs = ArtifactRef.parse(found["runs"], shape.at(path, "runs"))
        limitations = ArtifactRef.parse(found["limitations"], shape.at(path, "limitations"))
        subject = Arm.parse(found["subject"], shape.at(path, "subject"))
        event = subject.definition.event
        if event is not None and event.kind not in SUBJECT_KINDS:
            raise shape.fail(
                shape.at(path, "subject.definition.event.kind"),
                "must be a NIP-EXT release (3184) or a decision-service head (30180)",
                Code.IDENTITY_MISMATCH,
            )
        baseline = None if found["baseline"] is None else Arm.parse(found["baseline"], shape.at(path, "baseline"))
        has_baseline = baseline is not None
        evaluator = shape.hex64(found["evaluator"], shape.at(path, "evaluator"), "a 64-hex evaluator pubkey")
        started_at = shape.integer(found["started_at"], shape.at(path, "started_at"), low=0)
        ended_at = shape.integer(found["ended_at"], shape.at(path, "ended_at"), low=0)
        if started_at > ended_at:
            raise shape.fail(shape.at(path, "started_at"), "is after ended_at")
        coverage = Coverage.parse(found["coverage"], shape.at(path, "coverage"), has_baseline=has_baseline)
        items = shape.indexed(found["measurements"], shape.at(path, "measurements"), max_items=MAX_MEASUREMENTS)
        measurements = tuple(Measurement.parse(item, at, has_baseline=has_baseline) for at, item in items)
        verdict = Verdict(_unsupported_word(found["verdict"], shape.at(path, "verdict"), tuple(Verdict)))
        if not has_baseline and verdict is not Verdict.INCONCLUSIVE:
            raise shape.fail(
                shape.at(path, "verdict"),
                "a report without a baseline claims no change: it is inconclusive",
                Code.IDENTITY_MISMATCH,
            )
        meta_path = shape.at(path, "meta")
        meta = shape.obj(found["meta"], meta_path)
        if "ext_eval" not in meta:
            raise shape.fail(shape.at(meta_path, "ext_eval"), "is required")
        ext_eval = ExtEval.parse(meta["ext_eval"], shape.at(meta_path, "ext_eval"), has_baseline=has_baseline)
        return cls(
            suite=suite,
            partition=partition,
            subject=subject,
            baseline=baseline,
            evaluator=evaluator,
            started_at=started_at,
            ended_at=ended_at,
            runs=runs,
            coverage=coverage,
            measurements=measurements,
            verdict=verdict,
            limitations=limitations,
            ext_eval=ext_eval,
            meta_extra={key: item for key, item in meta.items() if key != "ext_eval"},
        )

    @classmethod
    def parse_bytes(cls, data: bytes) -> Report:
        """A reader's parse of exact report bytes: at most 64 KiB, strict JSON, then the profile."""
        if len(data) > MAX_REPORT_BYTES:
            raise ContractError(Code.LIMIT_EXCEEDED, "", f"report is {len(data)} bytes; at most {MAX_REPORT_BYTES}")
        return cls.parse(read(data))

    @property
    def trainer(self) -> str:
        """Whom the result credits: a hosted run's requester, otherwise the evaluator."""
        requester = self.ext_eval.requester
        return self.evaluator if requester is None else requester.pubkey

    @property
    def distribution(self) -> str:
        """The task distribution claimed: the suite's declared one, else the subject's definition id."""
        return self.ext_eval.distribution or self.subject.definition.id

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "v": REPORT_SCHEMA,
            "requires": [],
            "suite": self.suite.to_json(),
            "partition": self.partition.to_json(),
            "subject": self.subject.to_json(),
            "baseline": None if self.baseline is None else self.baseline.to_json(),
            "evaluator": self.evaluator,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "runs": self.runs.to_json(),
            "coverage": self.coverage.to_json(),
            "measurements": [item.to_json() for item in self.measurements],
            "verdict": self.verdict.value,
            "limitations": self.limitations.to_json(),
            "meta": {**self.meta_extra, "ext_eval": self.ext_eval.to_json()},
        }


def _suite(value: JsonValue, path: str) -> ArtifactRef:
    suite = ArtifactRef.parse(value, path)
    if suite.schema != SUITE_SCHEMA:
        raise shape.fail(shape.at(path, "schema"), f"must be {SUITE_SCHEMA!r}", Code.IDENTITY_MISMATCH)
    if suite.event is not None and suite.event.kind != RELEASE_KIND:
        raise shape.fail(shape.at(path, "event.kind"), "a suite is released as a 3184", Code.IDENTITY_MISMATCH)
    return suite


def report_ref(report: Report) -> tuple[bytes, ArtifactRef]:
    """The report's JCS bytes and the ArtifactRef naming them, refused unless a reader accepts the bytes."""
    data = canonical(report.to_json())
    Report.parse_bytes(data)
    return data, ArtifactRef.of_bytes(data, "application/json", REPORT_SCHEMA)
