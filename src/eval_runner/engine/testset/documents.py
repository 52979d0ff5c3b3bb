"""The suite documents: the canonical case manifest (`cases.json`, JCS) and `suite.json` with the
documents it references (runner.md §13.10, wire.md §13.5, §14.1), and the file list a suite release
carries (wire.md §14.2).

A published suite is accepted only if this runner rebuilds `suite.json` byte for byte (runner.md §10.3
step 3), so the shapes and words here are the reference's (`ext-eval` `report::suite_artifacts`). The
case manifest and `suite.json` are written by the contract builders (`contracts.case_manifest`,
`contracts.suite`), which check them as a reader would. What the spec does not pin, and this module
takes as input (the gate file's bytes, `environment.json`'s engine), is in decisions.md ("The test set").
"""

from __future__ import annotations

from dataclasses import dataclass

from eval_runner.contracts.case_manifest import CaseEntry
from eval_runner.contracts.case_manifest import CaseFile as ManifestFile
from eval_runner.contracts.case_manifest import case_manifest as build_case_manifest
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, pretty
from eval_runner.contracts.suite import Suite as SuiteDocument
from eval_runner.engine.testset.cases import CASE_FILE, FIXTURES_DIR, GRADERS_DIR, PROMPT_FILE, Case, CaseKind, Suite
from eval_runner.engine.testset.frontmatter import CASE_SCHEMA, TestSetError

SUITE_SCHEMA = "openagents.eval-suite.v1"
PARTITION_SCHEMA = "openagents.eval-partition.v1"
WORKLOAD_SCHEMA = "openagents.ext-eval-workload.v1"
LABELS_SCHEMA = "openagents.ext-eval-labels.v1"
METRICS_SCHEMA = "openagents.ext-eval-metrics.v1"
ENVIRONMENT_SCHEMA = "openagents.ext-eval-environment.v1"
GATE_SCHEMA = "openagents.gym.gate.v2"
GATE_COMPONENT = "gym-gates/ext-eval-v2"
JSON_MEDIA, MARKDOWN_MEDIA, TOML_MEDIA, BYTES_MEDIA = (
    "application/json",
    "text/markdown",
    "application/toml",
    "application/octet-stream",
)
#: The engine label `environment.json` names by default; the reference writes its crate version here.
DEFAULT_ENGINE = "ext-eval 0.1.0"


def case_entry(case: Case) -> CaseEntry:
    """One case of the manifest: its files by exact-byte reference (grader files only, by stem)."""
    config = case.files.case_toml
    return CaseEntry(
        id=case.name,
        kind=case.kind,
        runs=case.runs,
        prompt=ArtifactRef.of_bytes(case.files.prompt, MARKDOWN_MEDIA, CASE_SCHEMA),
        config=None if config is None else ArtifactRef.of_bytes(config, TOML_MEDIA, CASE_SCHEMA),
        graders=tuple(
            ManifestFile(
                grader.name.removesuffix(".md"), ArtifactRef.of_bytes(grader.data, MARKDOWN_MEDIA, CASE_SCHEMA)
            )
            for grader in case.files.graders
        ),
        fixtures=tuple(
            ManifestFile(fixture.name, ArtifactRef.of_bytes(fixture.data, BYTES_MEDIA))
            for fixture in case.files.fixtures
        ),
    )


def case_manifest(suite: Suite) -> bytes:
    """`cases.json`: JCS bytes of `{v, requires: [], cases}` with the cases in name order, checked by
    `contracts.case_manifest` as a reader would check them."""
    ordered = sorted(suite.cases, key=lambda case: case.name)
    try:
        data, _ = build_case_manifest([case_entry(case) for case in ordered])
    except ContractError as error:
        raise TestSetError(str(suite.dir), None, f"the case manifest does not check: {error.detail}") from None
    return data


@dataclass(frozen=True, slots=True)
class SuiteDocuments:
    """The documents of a suite, by their name under `artifacts/`, and the references to the three a
    report and a release name directly. `suite` carries the release pointer when the suite is published."""

    files: dict[str, bytes]
    suite: ArtifactRef
    cases: ArtifactRef
    partition: ArtifactRef

    @property
    def suite_bytes(self) -> bytes:
        return self.files["suite.json"]


def _metric(ident: str, unit: str, direction: str, population: str, aggregation: str) -> dict[str, JsonValue]:
    return {
        "id": ident,
        "unit": unit,
        "direction": direction,
        "population": population,
        "aggregation": f"ext-eval.v1/{aggregation}",
        "missing": "report_separately",
    }


def _metrics(suite: Suite) -> list[JsonValue]:
    out: list[JsonValue] = [
        _metric("cases_passed", "cases", "higher", "cases whose pass is decided in the arm", "count"),
        _metric("mean_score", "score", "higher", "cases with a score in the arm", "mean"),
        _metric("cost_usd", "usd", "lower", "every attempt in the arm", "sum"),
        _metric("seconds", "seconds", "lower", "every attempt in the arm", "sum"),
        _metric("change", "score", "higher", "cases scored in both arms", "difference_of_means"),
    ]
    for case in suite.cases:
        out.append(_metric(f"case.{case.name}.score", "score", "higher", "scored runs of the case", "mean"))
        out.append(_metric(f"case.{case.name}.runs_passed", "runs", "higher", "planned runs of the case", "count"))
        out.append(
            _metric(f"case.{case.name}.change", "score", "higher", "the case, when scored in both arms", "difference")
        )
    return out


def suite_documents(
    suite: Suite,
    *,
    author: str,
    package: str,
    component: str,
    gate_file: bytes,
    environment: dict[str, JsonValue] | None = None,
    engine: str = DEFAULT_ENGINE,
    suite_release: EventRef | None = None,
) -> SuiteDocuments:
    """`suite.json` and what it references, for suite id `<author>:<package>/<component>`.

    For a suite that has not run (a release, or the published-suite digest check) the reference
    builds the same documents with the suite author as author; so does this function, which needs no
    runs. `environment` replaces the default `{v, requires, engine}` document when the runner names one.
    """
    files: dict[str, bytes] = {}

    def put(name: str, value: dict[str, JsonValue], schema: str) -> ArtifactRef:
        data = pretty(value)
        files[name] = data
        return ArtifactRef.of_bytes(data, JSON_MEDIA, schema)

    manifest = case_manifest(suite)
    files["cases.json"] = manifest
    cases = ArtifactRef.of_bytes(manifest, JSON_MEDIA, CASE_SCHEMA)
    partition = put(
        "partition.json",
        {
            "v": PARTITION_SCHEMA,
            "requires": [],
            "development": [case.name for case in suite.cases],
            "held_out": [],
            "excluded": [],
        },
        PARTITION_SCHEMA,
    )
    counts = {kind.value: sum(1 for case in suite.cases if case.kind is kind) for kind in CaseKind}
    workload = put(
        "workload.json",
        {
            "v": WORKLOAD_SCHEMA,
            "requires": [],
            "collection": "authored",
            "synthetic": True,
            "task_families": dict(counts),
            "frame": "the case directories the suite's author wrote under its eval directory",
            "inclusion": "every case directory the run kept",
            "sampling": "every case under the eval directory the run kept",
            "exclusions": [],
            "strata": dict(counts),
            "method": "constructed",
        },
        WORKLOAD_SCHEMA,
    )
    labels = put(
        "labels.json",
        {
            "v": LABELS_SCHEMA,
            "requires": [],
            "source": author,
            "rubric": "each case's graders, as listed in cases.json",
            "procedure": (
                "the graders run on every run; structural graders are deterministic, "
                "and decision and judge graders ask a door three times"
            ),
            "uncertainty": "a suite written by an extension's publisher is the publisher's own claim",
        },
        LABELS_SCHEMA,
    )
    metrics = put("metrics.json", {"v": METRICS_SCHEMA, "requires": [], "metrics": _metrics(suite)}, METRICS_SCHEMA)
    environment_value = environment or {"v": ENVIRONMENT_SCHEMA, "requires": [], "engine": engine}
    environment_schema = environment_value.get("v")
    environment_ref = put(
        "environment.json",
        environment_value,
        environment_schema if isinstance(environment_schema, str) else ENVIRONMENT_SCHEMA,
    )
    gate = ArtifactRef.of_bytes(gate_file, JSON_MEDIA, GATE_SCHEMA)
    document = SuiteDocument(
        id=f"{author}:{package}/{component}",
        workload=workload,
        cases=cases,
        partition=partition,
        labels=labels,
        metrics=metrics,
        acceptance=DefinitionRef(id=f"{author}:{GATE_COMPONENT}", artifact=gate),
        environment=environment_ref,
    )
    try:
        suite_bytes, suite_ref = document.ref()
    except ContractError as error:
        raise TestSetError(str(suite.dir), None, f"the suite document does not check: {error.detail}") from None
    files["suite.json"] = suite_bytes
    if suite_release is not None:
        suite_ref = ArtifactRef(suite_ref.digest, suite_ref.size, suite_ref.media_type, suite_ref.schema, suite_release)
    return SuiteDocuments(files=files, suite=suite_ref, cases=cases, partition=partition)


def case_release_files(suite: Suite) -> list[tuple[str, bytes]]:
    """Every case file a suite release lists, as (`evals/<case name>/<file>`, bytes), per case in suite
    order: `prompt.md`, `case.toml` (if any), `graders/<file>.md`, `fixtures/<path>` (runner.md §16.1).
    A release lists `suite.json` and `cases.json` before these."""
    out: list[tuple[str, bytes]] = []
    for case in suite.cases:
        root = f"evals/{case.name}"
        out.append((f"{root}/{PROMPT_FILE}", case.files.prompt))
        if case.files.case_toml is not None:
            out.append((f"{root}/{CASE_FILE}", case.files.case_toml))
        out.extend((f"{root}/{GRADERS_DIR}/{grader.name}", grader.data) for grader in case.files.graders)
        out.extend((f"{root}/{FIXTURES_DIR}/{fixture.name}", fixture.data) for fixture in case.files.fixtures)
    return out
