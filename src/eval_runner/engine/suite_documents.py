"""The suite documents: the canonical case manifest (`cases.json`, JCS) and `suite.json` with the
documents it references (runner.md §13.10, wire.md §13.5, §14.1), and the file list a suite release
carries (wire.md §14.2).

A published suite is accepted only if this runner rebuilds `suite.json` byte for byte (runner.md
§10.3 step 3), so the shapes and words here are the reference's (`ext-eval` `report::suite_artifacts`,
newest stored version, whose workload carries both the older keys `collection`, `synthetic`,
`task_families` and the newer `frame`, `inclusion`, `strata`, `method`). Every JSON document except the
manifest is pretty JSON with sorted keys and a trailing newline (`strict_json.pretty`, serde's
`to_vec_pretty` plus `\\n`); the manifest is JCS.

What is not well specified, so this module takes it as input or marks it:
* the gate file bytes (`ext-eval-v2.json`), whose ArtifactRef `acceptance` carries: `gate_file`;
* `environment.json`: the reference's default names the crate version (`ext-eval <version>`), which
  we do not know (runner.md open question 2): `engine` defaults to `DEFAULT_ENGINE`;
* no fixture from a real release has been checked against these bytes yet.
The case manifest shape is built here because no contract module builds it; entries are checked
against wire.md §14.1 before the bytes are returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from eval_runner.contracts.case_id import is_case_id
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical, pretty
from eval_runner.engine.frontmatter import CASE_SCHEMA, MAX_NAME_BYTES, TestSetError
from eval_runner.engine.testset import (
    CASE_FILE,
    FIXTURES_DIR,
    GRADERS_DIR,
    MAX_FILE_BYTES,
    MAX_FIXTURE_PATH_BYTES,
    MAX_FIXTURES,
    MAX_GRADERS,
    PROMPT_FILE,
    Case,
    CaseKind,
    Suite,
)

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
MAX_MANIFEST_CASES = 256


def case_entry(case: Case) -> dict[str, JsonValue]:
    """One case of the manifest: its files by exact-byte reference (grader files only, by stem)."""
    config = case.files.case_toml
    return {
        "id": case.name,
        "kind": case.kind.value,
        "runs": case.runs,
        "prompt": ArtifactRef.of_bytes(case.files.prompt, MARKDOWN_MEDIA, CASE_SCHEMA).to_json(),
        "config": None if config is None else ArtifactRef.of_bytes(config, TOML_MEDIA, CASE_SCHEMA).to_json(),
        "graders": [
            {
                "name": grader.name.removesuffix(".md"),
                "artifact": ArtifactRef.of_bytes(grader.data, MARKDOWN_MEDIA, CASE_SCHEMA).to_json(),
            }
            for grader in case.files.graders
        ],
        "fixtures": [
            {"path": fixture.name, "artifact": ArtifactRef.of_bytes(fixture.data, BYTES_MEDIA).to_json()}
            for fixture in case.files.fixtures
        ],
    }


def _check_entry(case: Case) -> None:
    """The case manifest's rules (wire.md §14.1) for one case; the loader already holds them all, so
    this only guards a suite assembled some other way."""

    def fail(message: str) -> TestSetError:
        return TestSetError(f"{case.path}/{PROMPT_FILE}", None, f"cannot enter the case manifest: {message}")

    if not is_case_id(case.name):
        raise fail(f"the case id `{case.name}` is not in the case-id grammar")
    if len(case.files.graders) > MAX_GRADERS or len(case.files.fixtures) > MAX_FIXTURES:
        raise fail("too many grader files or fixtures")
    if not case.files.graders and case.files.case_toml is None:
        raise fail("a case with no grader file needs a case.toml")
    names = [grader.name.removesuffix(".md") for grader in case.files.graders]
    if any(not is_case_id(name, MAX_NAME_BYTES) for name in names) or names != sorted(set(names)):
        raise fail("grader file names must be unique case ids in increasing order")
    paths = [fixture.name for fixture in case.files.fixtures]
    if paths != sorted(set(paths)) or any(len(path.encode()) > MAX_FIXTURE_PATH_BYTES for path in paths):
        raise fail("fixture paths must be unique, in increasing order, and at most 512 bytes")
    sizes = [len(case.files.prompt), len(case.files.case_toml or b"")]
    sizes += [len(item.data) for item in case.files.graders + case.files.fixtures]
    if max(sizes) > MAX_FILE_BYTES:
        raise fail("a case file is over 1 MiB")


def case_manifest(suite: Suite) -> bytes:
    """`cases.json`: JCS bytes of `{v, requires: [], cases}` with the cases in name order."""
    ordered = sorted(suite.cases, key=lambda case: case.name)
    if not 1 <= len(ordered) <= MAX_MANIFEST_CASES:
        raise TestSetError(str(suite.dir), None, f"a case manifest holds 1 to {MAX_MANIFEST_CASES} cases")
    for earlier, later in pairwise(ordered):
        if earlier.name == later.name:
            raise TestSetError(f"{later.path}/{PROMPT_FILE}", "name", f"two cases are named `{later.name}`")
    for case in ordered:
        _check_entry(case)
    return canonical({"v": CASE_SCHEMA, "requires": [], "cases": [case_entry(case) for case in ordered]})


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
    suite_ref = put(
        "suite.json",
        {
            "v": SUITE_SCHEMA,
            "requires": [],
            "id": f"{author}:{package}/{component}",
            "purpose": "operation",
            "workload": workload.to_json(),
            "cases": cases.to_json(),
            "partition": partition.to_json(),
            "labels": labels.to_json(),
            "metrics": metrics.to_json(),
            "acceptance": {"id": f"{author}:{GATE_COMPONENT}", "artifact": gate.to_json()},
            "environment": environment_ref.to_json(),
        },
        SUITE_SCHEMA,
    )
    if suite_release is not None:
        suite_ref = ArtifactRef(suite_ref.digest, suite_ref.size, suite_ref.media_type, suite_ref.schema, suite_release)
    return SuiteDocuments(files=files, suite=suite_ref, cases=cases, partition=partition)


def media_type(path: str) -> str:
    """A release file's media type by extension (wire.md §14.2)."""
    for suffix, media in ((".md", MARKDOWN_MEDIA), (".toml", TOML_MEDIA), (".json", JSON_MEDIA)):
        if path.endswith(suffix):
            return media
    return BYTES_MEDIA


def case_release_files(suite: Suite) -> list[tuple[str, bytes]]:
    """Every case file a suite release lists, as (`evals/<case path>/<file>`, bytes), in path order:
    `prompt.md`, `case.toml`, `graders/<file>.md` and `fixtures/<path>` (wire.md §14.2)."""
    out: list[tuple[str, bytes]] = []
    for case in suite.cases:
        root = f"evals/{case.path}"
        out.append((f"{root}/{PROMPT_FILE}", case.files.prompt))
        if case.files.case_toml is not None:
            out.append((f"{root}/{CASE_FILE}", case.files.case_toml))
        out.extend((f"{root}/{GRADERS_DIR}/{grader.name}", grader.data) for grader in case.files.graders)
        out.extend((f"{root}/{FIXTURES_DIR}/{fixture.name}", fixture.data) for fixture in case.files.fixtures)
    return sorted(out, key=lambda item: item[0])
