"""The extension suite `openagents.eval-suite.v1` (wire.md §13.5) and the package that publishes it (§14.2).

A report names its suite by the digest of `suite.json`, and a check only counts when it ran the same
suite, so a published suite must be reconstructible from its release alone. `check_suite_package` is
that rule, in the reference's order and with its codes (`eval_ext::check_suite_package`);
`suite_manifest` writes the manifest the runner releases (§16.1 of the runner spec).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.case_manifest import CASE_SCHEMA, CaseManifest
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import Component, Manifest, PackageFile, Provenance
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, qualified_id
from eval_runner.contracts.strict_json import JsonValue, pretty, read

SUITE_SCHEMA = "openagents.eval-suite.v1"
#: Gym gates a suite may name as its acceptance (the last `/` component of the DefinitionRef id).
GATES = ("ext-eval-v1", "ext-eval-v2", "ext-eval-cost-v1")
COMPONENT_KIND = "eval-suite"
_ARTIFACTS = ("workload", "partition", "labels", "metrics", "environment")
_MEDIA_TYPES = {".md": "text/markdown", ".toml": "application/toml", ".json": "application/json"}


@dataclass(frozen=True, slots=True)
class Suite:
    """A checked extension suite (`purpose: "operation"`)."""

    id: str
    workload: ArtifactRef
    cases: ArtifactRef
    partition: ArtifactRef
    labels: ArtifactRef
    metrics: ArtifactRef
    acceptance: DefinitionRef
    environment: ArtifactRef
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Suite:
        keys = ("v", "requires", "id", "purpose", "cases", "acceptance", *_ARTIFACTS)
        found = shape.closed(value, path, keys, ("meta",), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), SUITE_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        if found["purpose"] != "operation":
            raise shape.fail(
                shape.at(path, "purpose"), "an extension suite's purpose is 'operation'", Code.UNSUPPORTED_FEATURE
            )
        acceptance = DefinitionRef.parse(found["acceptance"], shape.at(path, "acceptance"))
        if acceptance.id.rsplit("/", 1)[-1] not in GATES:
            raise shape.fail(shape.at(path, "acceptance.id"), f"the gate is one of {GATES}", Code.IDENTITY_MISMATCH)
        cases = ArtifactRef.parse(found["cases"], shape.at(path, "cases"))
        if cases.schema != CASE_SCHEMA:
            raise shape.fail(shape.at(path, "cases.schema"), f"must be {CASE_SCHEMA!r}", Code.IDENTITY_MISMATCH)
        refs = {key: ArtifactRef.parse(found[key], shape.at(path, key)) for key in _ARTIFACTS}
        meta = None
        if "meta" in found:
            meta = shape.obj(found["meta"], shape.at(path, "meta"))
        return cls(
            id=qualified_id(found["id"], shape.at(path, "id")),
            cases=cases,
            acceptance=acceptance,
            meta=meta,
            **refs,
        )

    @classmethod
    def parse_bytes(cls, data: bytes) -> Suite:
        return cls.parse(read(data))

    @property
    def author(self) -> str:
        return self.id.split(":", 1)[0]

    @property
    def package(self) -> str:
        return self.id.split(":", 1)[1].split("/", 1)[0]

    @property
    def component(self) -> str:
        return self.id.rsplit("/", 1)[1]

    @property
    def gate(self) -> str:
        return self.acceptance.id.rsplit("/", 1)[1]

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": SUITE_SCHEMA,
            "requires": [],
            "id": self.id,
            "purpose": "operation",
            "workload": self.workload.to_json(),
            "cases": self.cases.to_json(),
            "partition": self.partition.to_json(),
            "labels": self.labels.to_json(),
            "metrics": self.metrics.to_json(),
            "acceptance": self.acceptance.to_json(),
            "environment": self.environment.to_json(),
        }
        if self.meta is not None:
            out["meta"] = self.meta
        return out

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """`suite.json` as the engine writes it (pretty JSON), checked, and the ArtifactRef a report names."""
        data = pretty(Suite.parse(self.to_json()).to_json())
        return data, ArtifactRef.of_bytes(data, "application/json", SUITE_SCHEMA)


@dataclass(frozen=True, slots=True)
class SuitePackage:
    manifest: Manifest
    slug: str
    suite: Suite
    cases: CaseManifest


def check_suite_package(manifest: Manifest, suite_bytes: bytes, cases_bytes: bytes) -> SuitePackage:
    """One `eval-suite` component, whose definition is `suite_bytes`, whose case manifest is
    `cases_bytes`, with the case manifest and every case file listed by digest and size."""
    suites = [component for component in manifest.components if component.kind == COMPONENT_KIND]
    if len(suites) != 1:
        raise shape.fail("components", f"a suite package has exactly one {COMPONENT_KIND} component")
    definition = suites[0].definition
    if definition.schema != SUITE_SCHEMA:
        raise shape.fail("components.definition.schema", f"must be {SUITE_SCHEMA!r}", Code.IDENTITY_MISMATCH)
    if not definition.matches(suite_bytes):
        raise ContractError(Code.IDENTITY_MISMATCH, "suite", "the bytes are not the component's definition")
    suite = Suite.parse_bytes(suite_bytes)
    if not suite.cases.matches(cases_bytes):
        raise ContractError(Code.IDENTITY_MISMATCH, "cases", "the bytes are not the suite's case manifest")
    cases = CaseManifest.parse_bytes(cases_bytes)
    for artifact in (suite.cases, *(file for case in cases.cases for file in case.files())):
        if not manifest.listed(artifact):
            raise ContractError(Code.CONTENT_UNAVAILABLE, "files", f"a case file is not listed: {artifact.digest}")
    return SuitePackage(manifest=manifest, slug=suites[0].slug, suite=suite, cases=cases)


def media_type_for(path: str) -> str:
    """The media type the runner lists a file under, by extension."""
    dot = path.rfind(".")
    return _MEDIA_TYPES.get(path[dot:] if dot > path.rfind("/") else "", "application/octet-stream")


def case_file_paths(cases: CaseManifest) -> list[tuple[str, ArtifactRef]]:
    """Where each case file lives in a suite package, in suite order: `evals/<case>/…`."""
    out: list[tuple[str, ArtifactRef]] = []
    for case in cases.cases:
        base = f"evals/{case.id}"
        out.append((f"{base}/prompt.md", case.prompt))
        if case.config is not None:
            out.append((f"{base}/case.toml", case.config))
        out.extend((f"{base}/graders/{grader.name}.md", grader.artifact) for grader in case.graders)
        out.extend((f"{base}/fixtures/{fixture.name}", fixture.artifact) for fixture in case.fixtures)
    return out


def suite_manifest(suite: Suite, suite_ref: ArtifactRef, files: Iterable[tuple[str, ArtifactRef]]) -> Manifest:
    """The manifest a runner releases a suite under: package `<author>:<package>`, version
    `suite-<first 12 hex of the suite digest>`, licence NOASSERTION, one `eval-suite` component, and
    `files` listed in the order given (suite.json, cases.json, then `case_file_paths`)."""
    listed = tuple(
        PackageFile(path=path, digest=artifact.digest, size=artifact.size, media_type=media_type_for(path))
        for path, artifact in files
    )
    return Manifest.parse(
        Manifest(
            package=f"{suite.author}:{suite.package}",
            version="suite-" + suite_ref.digest.removeprefix("sha256:")[:12],
            license="NOASSERTION",
            provenance=Provenance(source="local"),
            components=(Component(slug=suite.component, kind=COMPONENT_KIND, definition=suite_ref),),
            files=listed,
        ).to_json()
    )
