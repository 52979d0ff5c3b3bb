"""The typed `output` of a completed hosted result (wire.md §10.2–10.3): a run's or a publish's.

A run's output is what the phone shows and keeps: the report's ArtifactRef (which a later publish names),
the sealed `3188` holding it, the headline counts, the verdict, and up to four plain notes on time and
cost. A publish's output points at the suite release and the `3189` result. Both are closed, with the
reference's codes (`hosted.rs`).
"""

from __future__ import annotations

from dataclasses import dataclass

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code
from eval_runner.contracts.ext_eval import Headline as Headline  # the run output carries the profile's headline
from eval_runner.contracts.hosted import HOSTED_SCHEMA, RELEASE_KIND, REPORT_SCHEMA, RESULT_KIND, SEALED_KIND
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import JsonValue

VERDICTS = ("pass", "fail", "inconclusive")
MAX_NOTES = 4
MAX_NOTE_CHARS = 200


def _head(value: JsonValue, path: str, keys: tuple[str, ...], action: str) -> dict[str, JsonValue]:
    found = shape.closed(value, path, keys, unknown=Code.UNSUPPORTED_FEATURE)
    shape.literal(found["v"], shape.at(path, "v"), HOSTED_SCHEMA, Code.UNSUPPORTED_VERSION)
    shape.literal(found["action"], shape.at(path, "action"), action)
    return found


def _headline(value: JsonValue, path: str) -> Headline:
    """The profile's headline; in an answer no arm may pass more cases than were scored."""
    headline = Headline.parse(value, path)
    baseline = headline.baseline_passed
    if headline.subject_passed > headline.total or (baseline is not None and baseline > headline.total):
        raise shape.fail(path, "more cases passed than were scored")
    return headline


def _notes(value: JsonValue, path: str) -> tuple[str, ...]:
    items = shape.array(value, path)
    if len(items) > MAX_NOTES:
        raise shape.fail(path, f"holds {len(items)} notes; at most {MAX_NOTES}")
    notes = []
    for index, item in enumerate(items):
        note = shape.string(item, shape.at(path, index))
        if len(note) > MAX_NOTE_CHARS:
            raise shape.fail(shape.at(path, index), f"is {len(note)} characters; at most {MAX_NOTE_CHARS}")
        notes.append(note)
    return tuple(notes)


@dataclass(frozen=True, slots=True)
class RunOutput:
    """A completed run: the report (JCS bytes, sealed in `sealed`), headline, verdict and notes."""

    report: ArtifactRef
    sealed: EventRef
    headline: Headline
    verdict: str
    notes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: JsonValue, path: str = "output") -> RunOutput:
        found = _head(value, path, ("v", "action", "report", "sealed", "headline", "verdict", "notes"), "run")
        report = ArtifactRef.parse(found["report"], shape.at(path, "report"))
        if report.schema != REPORT_SCHEMA:
            raise shape.fail(shape.at(path, "report.schema"), f"must be {REPORT_SCHEMA!r}", Code.IDENTITY_MISMATCH)
        return cls(
            report=report,
            sealed=EventRef.parse(found["sealed"], shape.at(path, "sealed"), kind=SEALED_KIND),
            headline=_headline(found["headline"], shape.at(path, "headline")),
            verdict=shape.choice(found["verdict"], shape.at(path, "verdict"), VERDICTS, Code.UNSUPPORTED_FEATURE),
            notes=_notes(found["notes"], shape.at(path, "notes")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "v": HOSTED_SCHEMA,
            "action": "run",
            "report": self.report.to_json(),
            "sealed": self.sealed.to_json(),
            "headline": self.headline.to_json(),
            "verdict": self.verdict,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class PublishOutput:
    """A completed publish: the suite's `3184` release and the `3189` result the runner signed."""

    suite_release: EventRef
    result: EventRef

    @classmethod
    def parse(cls, value: JsonValue, path: str = "output") -> PublishOutput:
        found = _head(value, path, ("v", "action", "suite_release", "result"), "publish")
        return cls(
            suite_release=EventRef.parse(found["suite_release"], shape.at(path, "suite_release"), kind=RELEASE_KIND),
            result=EventRef.parse(found["result"], shape.at(path, "result"), kind=RESULT_KIND),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "v": HOSTED_SCHEMA,
            "action": "publish",
            "suite_release": self.suite_release.to_json(),
            "result": self.result.to_json(),
        }


Output = RunOutput | PublishOutput


def parse_output(value: JsonValue, path: str = "output") -> Output:
    """A run's or a publish's output, by its `action`."""
    found = shape.obj(value, path)
    action = shape.choice(found.get("action"), shape.at(path, "action"), ("run", "publish"), Code.UNSUPPORTED_FEATURE)
    if action == "run":
        return RunOutput.parse(value, path)
    return PublishOutput.parse(value, path)
