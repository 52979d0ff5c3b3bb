"""The results directory: every file of runner.md §13.11, every ArtifactRef checked against the bytes
written, timestamp collisions, created files kept inside their run, and the secret scan."""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path

import pytest

from eval_runner.contracts.report import Report
from eval_runner.contracts.strict_json import read
from eval_runner.engine.report.build import BuiltReport, build_report
from eval_runner.engine.report.inputs import Attempt
from eval_runner.engine.report.results_dir import (
    ResultsError,
    SecretFoundError,
    scan_for_secrets,
    stamp,
    suite_files,
    write_results,
)
from eval_runner.engine.run.collect import path_bytes
from tests.support.report_inputs import S, better_attempts, inputs
from tests.support.results_walk import verify_every_ref

NOW = 1_790_000_123_456


def built_and_written(evals: Path, base: Path, attempts: tuple[Attempt, ...] | None = None) -> tuple[BuiltReport, Path]:
    given = inputs(evals, attempts)
    built = build_report(given)
    return built, write_results(base, built, given.attempts, suite_files(given.suite), now_ms=NOW)


def test_the_directory_holds_every_file_of_the_layout(evals: Path, tmp_path: Path) -> None:
    built, directory = built_and_written(evals, tmp_path / "results")
    assert directory.name == "2026-09-21T14-15-23.456Z" == stamp(NOW)
    assert (directory / "report.json").read_bytes() == built.report_bytes
    assert Report.parse_bytes((directory / "report.json").read_bytes()) == built.report
    assert (directory / "report.html").read_bytes() == built.html
    assert (directory / "run.json").read_bytes() == built.run_json
    for name in (
        "suite.json",
        "cases.json",
        "partition.json",
        "workload.json",
        "labels.json",
        "metrics.json",
        "environment.json",
        "runs.json",
        "limitations.json",
        "subject-configuration.json",
        "baseline-configuration.json",
        "grades/overview/baseline-3.json",
    ):
        assert (directory / "artifacts" / name).is_file(), name
    run = directory / "runs/overview/subject-2"
    assert sorted(path.name for path in run.iterdir()) == [
        "created.json",
        "stderr.txt",
        "stdout.jsonl",
        "trajectory.json",
    ]
    assert read((run / "created.json").read_bytes()) == []
    suite = directory / "suite"
    assert (suite / "overview/fixtures/src/lib.rs").read_text() == "pub fn lib() {}\n"
    assert (suite / "greeting/graders/reply.md").is_file()
    assert (suite / "greeting/prompt.md").read_bytes() == (evals / "greeting/prompt.md").read_bytes()


def test_every_artifact_ref_verifies_against_bytes_in_the_directory(evals: Path, tmp_path: Path) -> None:
    built, directory = built_and_written(evals, tmp_path / "results")
    checked, by_digest = verify_every_ref(directory, built.report_bytes)
    # report → suite → cases → case files; report → runs → trajectories and grades; the arms' documents.
    assert checked > 40
    report = built.report
    named = {
        "artifacts/runs.json": report.runs,
        "artifacts/limitations.json": report.limitations,
        "artifacts/partition.json": report.partition,
        "artifacts/suite.json": report.suite,
        "artifacts/subject-lock.json": report.subject.lock,
        "artifacts/subject-configuration.json": report.subject.configuration,
        "artifacts/subject-definition.json": report.subject.definition.artifact,
        "runs/greeting/subject-1/trajectory.json": read(built.artifacts["runs.json"])["runs"][0]["artifacts"][0],
    }
    assert report.baseline is not None
    named["artifacts/baseline-lock.json"] = report.baseline.lock
    named["artifacts/baseline-agent.json"] = report.baseline.definition.artifact
    for path, ref in named.items():
        digest = ref["digest"] if isinstance(ref, dict) else ref.digest
        assert path in by_digest[digest], path


def test_a_taken_timestamp_gets_a_suffix(evals: Path, tmp_path: Path) -> None:
    base = tmp_path / "results"
    names = [built_and_written(evals, base)[1].name for _ in range(3)]
    assert names == [stamp(NOW), f"{stamp(NOW)}-1", f"{stamp(NOW)}-2"]


def test_created_files_stay_inside_their_run(evals: Path, tmp_path: Path) -> None:
    created = (("notes/a.txt", b"kept\n"), ("../../escape.txt", b"no"), ("big.bin", None), ("/etc/x", b"no"))
    attempts = tuple(
        dataclasses.replace(a, created=created) if a.key == ("overview", S, 1) else a for a in better_attempts()
    )
    _, directory = built_and_written(evals, tmp_path / "results", attempts)
    run = directory / "runs/overview/subject-1"
    assert read((run / "created.json").read_bytes()) == ["notes/a.txt", "../../escape.txt", "big.bin", "/etc/x"]
    assert (run / "files/notes/a.txt").read_bytes() == b"kept\n"
    assert sorted(p.relative_to(run / "files").as_posix() for p in (run / "files").rglob("*")) == [
        "notes",
        "notes/a.txt",
    ]
    assert not (directory / "runs/escape.txt").exists()
    assert not (directory / "runs/overview/escape.txt").exists()


def test_names_json_cannot_hold_are_listed_exactly_and_clashing_copies_never_fail_the_results(
    evals: Path, tmp_path: Path
) -> None:
    # What the agent named never sinks the results: a name that is not UTF-8 (listed with its bytes), two
    # paths that meet once a secret is scrubbed from one, a file where a directory would go, a path too
    # long to copy.
    odd = os.fsdecode(b"odd-\xff.txt")
    long = "d/" * 600 + "f.txt"
    created = (
        ("[redacted].txt", b"first"),
        ("[redacted].txt", b"second"),
        ("[redacted]", b"a file"),
        ("[redacted]/x", b"under a file"),
        (odd, b"odd"),
        (long, b"long"),
    )
    attempts = tuple(
        dataclasses.replace(a, created=created) if a.key == ("overview", S, 1) else a for a in better_attempts()
    )
    _, directory = built_and_written(evals, tmp_path / "results", attempts)
    run = directory / "runs/overview/subject-1"
    listed = read((run / "created.json").read_bytes())
    assert listed == [
        "[redacted].txt",
        "[redacted].txt",
        "[redacted]",
        "[redacted]/x",
        {"path": "odd-\\xff.txt", "path_base64": base64.b64encode(b"odd-\xff.txt").decode()},
        long,
    ]
    assert path_bytes(listed[4]["path"], listed[4]["path_base64"]) == b"odd-\xff.txt"
    assert sorted(os.listdir(run / "files")) == ["[redacted]", "[redacted].txt"]
    assert (run / "files/[redacted].txt").read_bytes() == b"first"
    assert (run / "files/[redacted]").read_bytes() == b"a file"


def test_a_missing_attempt_still_gets_its_run_directory(evals: Path, tmp_path: Path) -> None:
    attempts = better_attempts()[:-1]
    built, directory = built_and_written(evals, tmp_path / "results", attempts)
    assert read((directory / "runs/overview/baseline-3/created.json").read_bytes()) == []
    assert built.limitations.partial == "1 run did not finish"


def test_attempts_the_report_does_not_name_are_refused(evals: Path, tmp_path: Path) -> None:
    given = inputs(evals)
    built = build_report(given)
    changed = (dataclasses.replace(given.attempts[0], trajectory=b"{}"),)
    with pytest.raises(ResultsError, match="not the one the report names"):
        write_results(tmp_path / "results", built, changed, suite_files(given.suite))
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_a_secret_in_the_results_removes_them(evals: Path, tmp_path: Path) -> None:
    key = "sk-door-key-0123456789"
    attempts = tuple(
        dataclasses.replace(a, stdout=f"leaked {key}\n".encode()) if a.key == ("overview", S, 2) else a
        for a in better_attempts()
    )
    given = inputs(evals, attempts)
    built = build_report(given)
    base = tmp_path / "results"
    with pytest.raises(SecretFoundError) as raised:
        write_results(base, built, attempts, suite_files(given.suite), secrets=[key, b"decision-key"], now_ms=NOW)
    assert (
        str(raised.value) == "the door key was found in runs/overview/subject-2/stdout.jsonl; the results were removed"
    )
    assert raised.value.path == "runs/overview/subject-2/stdout.jsonl"
    assert list(base.iterdir()) == []


def test_a_clean_directory_passes_the_scan(evals: Path, tmp_path: Path) -> None:
    _, directory = built_and_written(evals, tmp_path / "results")
    scan_for_secrets(directory, ["sk-door-key-0123456789", b""])
    assert directory.is_dir()
