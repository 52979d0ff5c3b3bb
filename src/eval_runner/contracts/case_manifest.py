"""The case manifest `openagents.eval-case.v1` (wire.md §14.1): a suite's `cases` artifact.

It names every case file by digest and size, so a suite's identity covers its prompts, graders and
fixtures byte for byte, and a package can be checked to list them all. It is digested as JCS bytes (not
the engine's pretty JSON), which `case_manifest` writes after checking them as a reader would. Codes are
the reference's (`eval_ext::parse_case_manifest`; decisions.md, "Report-side contracts").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.case_id import MAX_GRADER_NAME_BYTES, case_id
from eval_runner.contracts.errors import Code
from eval_runner.contracts.ext_eval import MAX_CASES, CaseKind, case_kind
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read

CASE_SCHEMA = "openagents.eval-case.v1"
MAX_RUNS = 10
DEFAULT_RUNS = 3
MAX_GRADERS = 64
MAX_FIXTURES = 256
MAX_CASE_FILE_BYTES = 1_048_576
MAX_FIXTURE_PATH_BYTES = 512

_CASE_KEYS = ("id", "kind", "runs", "prompt", "config", "graders", "fixtures")
# Unicode general category Cc: C0, DEL and C1 controls.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def fixture_path(value: JsonValue, path: str) -> str:
    """A relative `/`-separated path of plain components: no empty, `.`, `..`, leading `/`, backslash
    or control character, at most 512 bytes. It becomes a file under the run's working directory."""
    if not isinstance(value, str):
        raise shape.fail(path, "must be a string")
    size = len(value.encode("utf-8", "surrogatepass"))
    if (
        not 1 <= size <= MAX_FIXTURE_PATH_BYTES
        or value.startswith("/")
        or "\\" in value
        or _CONTROL.search(value)
        or any(part in ("", ".", "..") for part in value.split("/"))
    ):
        raise shape.fail(path, f"must be a relative path of plain components, at most {MAX_FIXTURE_PATH_BYTES} bytes")
    return value


def _case_file(value: JsonValue, path: str, *, schema: bool) -> ArtifactRef:
    artifact = ArtifactRef.parse(value, path)
    if schema and artifact.schema != CASE_SCHEMA:
        raise shape.fail(shape.at(path, "schema"), f"must be {CASE_SCHEMA!r}", Code.IDENTITY_MISMATCH)
    if artifact.size > MAX_CASE_FILE_BYTES:
        raise shape.fail(
            shape.at(path, "size"), f"is {artifact.size} bytes; a case file is at most 1 MiB", Code.LIMIT_EXCEEDED
        )
    return artifact


@dataclass(frozen=True, slots=True)
class CaseFile:
    """A grader (`name`, its file stem) or a fixture (`path` below `fixtures/`) and its bytes."""

    name: str
    artifact: ArtifactRef


def _named(value: JsonValue, path: str, label: str, max_items: int) -> tuple[CaseFile, ...]:
    files: list[CaseFile] = []
    for item_path, item in shape.indexed(value, path, max_items=max_items):
        found = shape.closed(item, item_path, (label, "artifact"), unknown=Code.UNSUPPORTED_FEATURE)
        name_path = shape.at(item_path, label)
        if label == "name":
            name = case_id(found[label], name_path, max_bytes=MAX_GRADER_NAME_BYTES)
        else:
            name = fixture_path(found[label], name_path)
        artifact = _case_file(found["artifact"], shape.at(item_path, "artifact"), schema=label == "name")
        if files and files[-1].name >= name:
            raise shape.fail(name_path, f"{label}s must be unique and in increasing order")
        files.append(CaseFile(name=name, artifact=artifact))
    return tuple(files)


@dataclass(frozen=True, slots=True)
class CaseEntry:
    """One case: its kind, runs per arm, and the exact bytes of each of its files."""

    id: str
    kind: CaseKind
    runs: int
    prompt: ArtifactRef
    config: ArtifactRef | None
    graders: tuple[CaseFile, ...] = ()
    fixtures: tuple[CaseFile, ...] = ()

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> CaseEntry:
        found = shape.closed(value, path, _CASE_KEYS, unknown=Code.UNSUPPORTED_FEATURE)
        identifier = case_id(found["id"], shape.at(path, "id"))
        kind = case_kind(found["kind"], shape.at(path, "kind"))
        runs = found["runs"]
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
            raise shape.fail(shape.at(path, "runs"), f"must be an integer from 1 to {MAX_RUNS}")
        prompt = _case_file(found["prompt"], shape.at(path, "prompt"), schema=True)
        config = found["config"]
        if config is not None:
            config = _case_file(config, shape.at(path, "config"), schema=True)
        graders = _named(found["graders"], shape.at(path, "graders"), "name", MAX_GRADERS)
        fixtures = _named(found["fixtures"], shape.at(path, "fixtures"), "path", MAX_FIXTURES)
        if not graders and config is None:
            raise shape.fail(path, "a case needs a grader: a graders/ file, or a case.toml to hold them")
        return cls(
            id=identifier,
            kind=kind,
            runs=runs,
            prompt=prompt,
            config=config,
            graders=graders,
            fixtures=fixtures,
        )

    def files(self) -> Iterator[ArtifactRef]:
        """Every file of the case, prompt first (what a suite package must list)."""
        yield self.prompt
        if self.config is not None:
            yield self.config
        yield from (grader.artifact for grader in self.graders)
        yield from (fixture.artifact for fixture in self.fixtures)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "runs": self.runs,
            "prompt": self.prompt.to_json(),
            "config": None if self.config is None else self.config.to_json(),
            "graders": [{"name": item.name, "artifact": item.artifact.to_json()} for item in self.graders],
            "fixtures": [{"path": item.name, "artifact": item.artifact.to_json()} for item in self.fixtures],
        }


@dataclass(frozen=True, slots=True)
class CaseManifest:
    """A checked case manifest; cases in strictly increasing id order."""

    cases: tuple[CaseEntry, ...]
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> CaseManifest:
        found = shape.closed(value, path, ("v", "requires", "cases"), ("meta",), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), CASE_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        meta = None
        if "meta" in found:
            meta = shape.obj(found["meta"], shape.at(path, "meta"))
        cases_path = shape.at(path, "cases")
        items = shape.indexed(found["cases"], cases_path, max_items=MAX_CASES)
        if not items:
            raise shape.fail(cases_path, "a suite has at least one case")
        cases: list[CaseEntry] = []
        for item_path, item in items:
            case = CaseEntry.parse(item, item_path)
            if cases and cases[-1].id == case.id:
                raise shape.fail(shape.at(item_path, "id"), f"two cases are named {case.id!r}", Code.CONFLICT)
            if cases and cases[-1].id > case.id:
                raise shape.fail(shape.at(item_path, "id"), "cases must be in lexicographic order of id")
            cases.append(case)
        return cls(cases=tuple(cases), meta=meta)

    @classmethod
    def parse_bytes(cls, data: bytes) -> CaseManifest:
        return cls.parse(read(data))

    def should_not_fire(self) -> int:
        return sum(1 for case in self.cases if case.kind is CaseKind.SHOULD_NOT_FIRE)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": CASE_SCHEMA,
            "requires": [],
            "cases": [case.to_json() for case in self.cases],
        }
        if self.meta is not None:
            out["meta"] = self.meta
        return out


def case_manifest(cases: Sequence[CaseEntry]) -> tuple[bytes, ArtifactRef]:
    """The manifest's JCS bytes for `cases` (already in id order) and the suite's `cases` ArtifactRef.

    The bytes are parsed back before they are returned: a runner must never name a manifest a reader
    would refuse.
    """
    data = canonical(CaseManifest(cases=tuple(cases)).to_json())
    CaseManifest.parse_bytes(data)
    return data, ArtifactRef.of_bytes(data, "application/json", CASE_SCHEMA)
