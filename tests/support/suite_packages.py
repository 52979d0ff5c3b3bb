"""A released suite package for the suite and report property tests: the suite document, its case manifest and
package manifest, built from the reference two-case manifest and signed by a fixed author key."""

from __future__ import annotations

import hashlib

from eval_runner.contracts.case_manifest import CaseManifest, case_manifest
from eval_runner.contracts.package import Manifest
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.suite import Suite, case_file_paths, suite_manifest
from eval_runner.nostr.keys import SecretKey
from tests.support.reference_files import load, raw
from tests.support.sample_reports import blob

ROOT = SecretKey(hashlib.sha256(b"suite-author").digest())
AUTHOR = ROOT.public_key().to_hex()


def built() -> tuple[Suite, bytes, ArtifactRef, CaseManifest, bytes, Manifest]:
    cases = CaseManifest.parse(load("eval-ext/eval-case/valid/two-cases.json"))
    cases_bytes, cases_ref = case_manifest(cases.cases)
    gate = raw("gates/ext-eval-v2.json")
    suite = Suite(
        id=f"{AUTHOR}:repo-map-brief-tests/suite",
        workload=blob("workload", "openagents.ext-eval-workload.v1"),
        cases=cases_ref,
        partition=blob("partition", "openagents.eval-partition.v1"),
        labels=blob("labels", "openagents.ext-eval-labels.v1"),
        metrics=blob("metrics", "openagents.ext-eval-metrics.v1"),
        acceptance=DefinitionRef(
            id=f"{AUTHOR}:gym-gates/ext-eval-v2",
            artifact=ArtifactRef.of_bytes(gate, "application/json", "openagents.gym.gate.v2"),
        ),
        environment=blob("environment", "openagents.ext-eval-environment.v1"),
    )
    suite_bytes, suite_ref = suite.ref()
    files = [("suite.json", suite_ref), ("cases.json", cases_ref), *case_file_paths(cases)]
    return suite, suite_bytes, suite_ref, cases, cases_bytes, suite_manifest(suite, suite_ref, files)
