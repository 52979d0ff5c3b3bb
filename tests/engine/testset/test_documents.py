"""Suite documents: the JCS case manifest and the pretty suite.json and its referenced documents."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import canonical, read
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.documents import (
    DEFAULT_ENGINE,
    case_manifest,
    case_release_files,
    suite_documents,
)

AUTHOR = "ab" * 32
GATE = b'{"id": "ext-eval-v2"}\n'
REGEX = '+++\ntype = "regex"\n+++\n\nhello\n'


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture
def evals(tmp_path: Path) -> Path:
    files = {
        # Path order (b-dir, z-dir) differs from name order (a-named, y-named) on purpose.
        "b-dir/prompt.md": '+++\nv = "openagents.eval-case.v1"\nname = "y-named"\nruns = 2\n+++\nFire.\n',
        "b-dir/graders/g.md": REGEX,
        "b-dir/fixtures/src/lib.rs": "fn main() {}\n",
        "b-dir/fixtures/README.md": "# x\n",
        "z-dir/prompt.md": '+++\nkind = "should-not-fire"\n+++\nHi.\n',
        "z-dir/case.toml": 'v = "openagents.eval-case.v1"\nname = "a-named"\n',
        "z-dir/graders/reply.md": REGEX,
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_case_manifest_is_jcs_in_name_order(evals: Path) -> None:
    suite = load_suite(evals)
    data = case_manifest(suite)
    value = read(data)
    assert canonical(value) == data
    assert value["v"] == "openagents.eval-case.v1"
    assert value["requires"] == []
    first, second = value["cases"]
    assert [first["id"], second["id"]] == ["a-named", "y-named"]
    assert first["kind"] == "should-not-fire"
    assert first["runs"] == 3
    toml = (evals / "z-dir/case.toml").read_bytes()
    assert first["config"] == {
        "digest": sha(toml),
        "size": len(toml),
        "media_type": "application/toml",
        "schema": "openagents.eval-case.v1",
    }
    prompt = (evals / "b-dir/prompt.md").read_bytes()
    assert second["prompt"] == ArtifactRef.of_bytes(prompt, "text/markdown", "openagents.eval-case.v1").to_json()
    assert second["config"] is None
    assert [g["name"] for g in second["graders"]] == ["g"]
    assert [f["path"] for f in second["fixtures"]] == ["README.md", "src/lib.rs"]
    assert second["fixtures"][1]["artifact"] == {
        "digest": sha(b"fn main() {}\n"),
        "size": 13,
        "media_type": "application/octet-stream",
    }


def test_suite_json_and_its_documents(evals: Path) -> None:
    suite = load_suite(evals)
    documents = suite_documents(suite, author=AUTHOR, package="tool-tests", component="suite", gate_file=GATE)
    assert sorted(documents.files) == [
        "cases.json",
        "environment.json",
        "labels.json",
        "metrics.json",
        "partition.json",
        "suite.json",
        "workload.json",
    ]
    for name, data in documents.files.items():
        if name != "cases.json":
            assert data.endswith(b"}\n")
            assert data == (json.dumps(json.loads(data), indent=2, sort_keys=True) + "\n").encode()
    value = json.loads(documents.suite_bytes)

    def ref(name: str, schema: str) -> dict[str, object]:
        data = documents.files[name]
        return {"digest": sha(data), "size": len(data), "media_type": "application/json", "schema": schema}

    assert value == {
        "v": "openagents.eval-suite.v1",
        "requires": [],
        "id": f"{AUTHOR}:tool-tests/suite",
        "purpose": "operation",
        "workload": ref("workload.json", "openagents.ext-eval-workload.v1"),
        "cases": ref("cases.json", "openagents.eval-case.v1"),
        "partition": ref("partition.json", "openagents.eval-partition.v1"),
        "labels": ref("labels.json", "openagents.ext-eval-labels.v1"),
        "metrics": ref("metrics.json", "openagents.ext-eval-metrics.v1"),
        "acceptance": {
            "id": f"{AUTHOR}:gym-gates/ext-eval-v2",
            "artifact": {
                "digest": sha(GATE),
                "size": len(GATE),
                "media_type": "application/json",
                "schema": "openagents.gym.gate.v2",
            },
        },
        "environment": ref("environment.json", "openagents.ext-eval-environment.v1"),
    }
    assert documents.suite == ArtifactRef.of_bytes(
        documents.suite_bytes, "application/json", "openagents.eval-suite.v1"
    )
    assert documents.cases.digest == sha(documents.files["cases.json"])
    partition = json.loads(documents.files["partition.json"])
    assert partition["development"] == ["y-named", "a-named"]  # suite (path) order
    workload = json.loads(documents.files["workload.json"])
    assert workload["strata"] == workload["task_families"] == {"should-fire": 1, "should-not-fire": 1}
    assert workload["method"] == "constructed"
    metrics = [m["id"] for m in json.loads(documents.files["metrics.json"])["metrics"]]
    assert metrics[:5] == ["cases_passed", "mean_score", "cost_usd", "seconds", "change"]
    assert metrics[5:8] == ["case.y-named.score", "case.y-named.runs_passed", "case.y-named.change"]
    assert json.loads(documents.files["labels.json"])["source"] == AUTHOR
    assert json.loads(documents.files["environment.json"])["engine"] == DEFAULT_ENGINE


def test_suite_documents_are_reproducible_and_follow_every_byte(evals: Path) -> None:
    first = suite_documents(load_suite(evals), author=AUTHOR, package="p", component="suite", gate_file=GATE)
    again = suite_documents(load_suite(evals), author=AUTHOR, package="p", component="suite", gate_file=GATE)
    assert first.files == again.files
    (evals / "b-dir/fixtures/README.md").write_text("# y\n")
    changed = suite_documents(load_suite(evals), author=AUTHOR, package="p", component="suite", gate_file=GATE)
    assert changed.suite.digest != first.suite.digest
    assert changed.files["partition.json"] == first.files["partition.json"]


def test_a_published_suite_reference_carries_its_release(evals: Path) -> None:
    release = EventRef(id="cd" * 32, pubkey=AUTHOR, kind=3184)
    documents = suite_documents(
        load_suite(evals), author=AUTHOR, package="p", component="suite", gate_file=GATE, suite_release=release
    )
    assert documents.suite.event == release
    assert documents.suite.to_json()["event"] == release.to_json()


def test_release_files_list_every_case_file_by_case_name_in_suite_order(evals: Path) -> None:
    listed = case_release_files(load_suite(evals))
    assert [path for path, _ in listed] == [
        "evals/y-named/prompt.md",
        "evals/y-named/graders/g.md",
        "evals/y-named/fixtures/README.md",
        "evals/y-named/fixtures/src/lib.rs",
        "evals/a-named/prompt.md",
        "evals/a-named/case.toml",
        "evals/a-named/graders/reply.md",
    ]
    assert dict(listed)["evals/a-named/case.toml"] == (evals / "z-dir/case.toml").read_bytes()
