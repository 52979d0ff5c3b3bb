"""Building the report: a constructed two-case suite with synthetic attempts, read back as a reader would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import MeasuredArm, Report, Verdict
from eval_runner.contracts.report_documents import ArmLock, Limitations, RunsDocument
from eval_runner.contracts.report_figures import META_KEY as FIGURES_KEY
from eval_runner.contracts.report_statistics import META_KEY as STATISTICS_KEY
from eval_runner.contracts.report_statistics import StatisticRow, Statistics
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from eval_runner.engine.report.build import (
    FIXED_LIMITATIONS,
    NO_BASELINE,
    STATISTICS_LEFT_OUT,
    BuiltReport,
    ReportError,
    build_report,
)
from eval_runner.engine.report.inputs import Defaults, ReportInputs, RunEnd, RunSetup, planned_cases
from eval_runner.engine.verdict.gate import decision
from eval_runner.engine.verdict.gate_digest import gate_digest
from eval_runner.engine.verdict.scores import GradedRun, OutcomeWord, measured, score_suite
from eval_runner.engine.verdict.statistics import evidence, strata_of
from tests.support.report_inputs import (
    AGENT,
    AT,
    AUTHOR,
    GATE_FILE,
    REGEX,
    RUNNER,
    TWO_CASES,
    B,
    S,
    attempt,
    better_attempts,
    inputs,
    subject,
    trajectory,
    write_cases,
)

STATISTICS = (
    "p_helps",
    "p_harms",
    "p_helps_mid",
    "p_harms_mid",
    "delta_pass_rate",
    "delta_low_95",
    "delta_high_95",
    "cases_improved",
    "cases_worsened",
    "min_detectable_effect",
)


def graded(built: BuiltReport, given: ReportInputs) -> list[GradedRun]:
    kinds = {case.id: case.kind for case in planned_cases(given)}
    return [
        GradedRun(
            a.case,
            kinds[a.case],
            a.arm,
            a.attempt,
            a.coverage_word,
            a.score,
            a.passed,
            measured(a.cost_usd),
            measured(a.seconds),
        )
        for a in built.attempts
    ]


def metrics(report: Report, arm: MeasuredArm) -> dict[str, Any]:
    return {m.metric: m for m in report.measurements if m.arm is arm}


def statistics_of(report: Report) -> dict[str, StatisticRow]:
    found = Statistics.from_meta(report.meta_extra)
    return {} if found is None else {row.metric: row for row in found.rows}


# --- the report as a reader reads it ---------------------------------------------------------------


def test_the_report_parses_and_is_its_own_jcs_bytes(evals: Path) -> None:
    built = build_report(inputs(evals))
    parsed = Report.parse_bytes(built.report_bytes)
    assert parsed == built.report
    assert canonical(read(built.report_bytes)) == built.report_bytes
    assert built.report_ref.matches(built.report_bytes)
    assert built.report_ref.schema == "openagents.eval-report.v1"


def test_the_same_inputs_build_the_same_bytes(evals: Path) -> None:
    first, second = build_report(inputs(evals)), build_report(inputs(evals))
    assert first.report_bytes == second.report_bytes
    assert first.artifacts == second.artifacts
    assert (first.html, first.run_json) == (second.html, second.run_json)
    later = build_report(inputs(evals, ended_at=AT + 301))
    assert later.report_ref.digest != first.report_ref.digest


def test_headline_verdict_and_coverage_agree_with_the_scores_and_the_gate(evals: Path) -> None:
    given = inputs(evals)
    built = build_report(given)
    scores = score_suite(planned_cases(given), graded(built, given), baseline=True)
    decided = decision(scores.comparison)
    assert built.scores == scores
    assert built.report.verdict is Verdict.PASS
    assert built.report.verdict.value == decided.verdict.value
    headline = built.report.ext_eval.headline
    assert (headline.subject_passed, headline.baseline_passed, headline.total) == (2, 1, 2)
    subject_counts = built.report.coverage.subject
    assert (subject_counts.planned, subject_counts.attempted, subject_counts.completed) == (2, 6, 6)
    assert built.report.coverage.baseline is not None


def test_meta_ext_eval_names_the_gate_the_cases_and_who_relied_on_what(evals: Path) -> None:
    built = build_report(inputs(evals))
    ext = built.report.ext_eval
    # The reference's expected better.report.json names ext-eval-v2 by this rule digest.
    assert ext.gate == "sha256:4db54843c687cc4bd22beddb0622339d5ebd656b674d3785f16bc1bbcafde6b7"
    assert ext.gate == gate_digest(GATE_FILE) == built.gate_digest
    assert [(case.id, case.kind.value) for case in ext.cases] == [
        ("greeting", "should-not-fire"),
        ("overview", "should-fire"),
    ]
    assert ext.requester == EventRef(id="33" * 32, pubkey="44" * 32, kind=25920)
    assert ext.identity is not None
    assert ext.identity.value == "content"
    assert ext.reliance is not None
    assert ext.reliance.to_json() == {
        "runner": RUNNER,
        "host": digest_bytes(b"runner-host"),
        "door": "default",
        "model": None,
        "agent": "ext-eval@0.1.0",
        "selector": None,
        "graders": "ext-eval@0.1.0",
    }
    assert ext.defaults is None
    assert "defaults" not in read(built.report_bytes)["meta"]["ext_eval"]


def test_the_arms_name_their_definitions_locks_and_configurations(evals: Path) -> None:
    built = build_report(inputs(evals))
    report, docs = built.report, built.artifacts
    assert report.subject.definition.event == EventRef(id="11" * 32, pubkey=RUNNER, kind=3184)
    assert report.suite.event == EventRef(id="22" * 32, pubkey=AUTHOR, kind=3184)
    lock = ArmLock.parse_bytes(docs["subject-lock.json"])
    assert lock.definition == subject().definition
    assert [(p.name, p.size) for p in lock.programs] == [("repo-map", 49)]
    assert [s.name for s in lock.skills] == ["brief"]
    assert lock.agent == AGENT
    assert report.baseline is not None
    assert report.baseline.definition.id == f"{AUTHOR}:coder/coder"
    assert read(docs["baseline-agent.json"]) == {
        "v": "openagents.ext-eval-agent.v1",
        "requires": [],
        "agent": "coder",
        "binary": AGENT.to_json(),
    }
    baseline_lock = ArmLock.parse_bytes(docs["baseline-lock.json"])
    assert (baseline_lock.programs, baseline_lock.skills) == ((), ())
    configuration = read(docs["baseline-configuration.json"])
    assert configuration["v"] == "openagents.ext-eval-configuration.v1"
    assert configuration["run"] == {
        "agent": "coder -p",
        "arm": "baseline",
        "grants": ["read", "write"],
        "network": "door-only",
        "confinement": "/usr/bin/bwrap",
        "runs": 3,
        "baseline": True,
        "concurrency": 1,
        "classifier": False,
        "gate": "ext-eval-v2",
        "defaults": None,
    }


def test_runs_json_lists_every_attempt_with_its_atif_log_and_grades(evals: Path) -> None:
    built = build_report(inputs(evals))
    runs = RunsDocument.parse(read(built.artifacts["runs.json"]))
    assert len(runs.runs) == 12
    assert [(r.case, r.arm.value, r.attempt) for r in runs.runs[:4]] == [
        ("greeting", "subject", 1),
        ("greeting", "subject", 2),
        ("greeting", "subject", 3),
        ("greeting", "baseline", 1),
    ]
    first = runs.runs[0]
    atif, grades_ref = first.artifacts
    assert atif.schema == "ATIF-v1.8"
    assert atif.matches(trajectory("greeting", S, 1))
    assert grades_ref.schema == "openagents.ext-eval-grades.v1"
    assert grades_ref.matches(built.artifacts["grades/greeting/subject-1.json"])
    assert all(m.evidence == (built.report.runs,) for m in built.report.measurements)


def test_the_reference_measurements_keep_its_order_and_denominators(evals: Path) -> None:
    built = build_report(inputs(evals))
    rows = [(m.arm.value, m.metric, m.value, m.denominator, m.unknown_count) for m in built.report.measurements]
    assert rows[:8] == [
        ("subject", "cases_passed", 2, 2, 0),
        ("subject", "mean_score", 1.0, 2, 0),
        ("subject", "cost_usd", pytest.approx(0.06), 6, 0),
        ("subject", "seconds", pytest.approx(36 + 36.6), 6, 0),
        ("subject", "case.greeting.score", 1.0, 3, 0),
        ("subject", "case.greeting.runs_passed", 3, 3, 0),
        ("subject", "case.overview.score", 1.0, 3, 0),
        ("subject", "case.overview.runs_passed", 3, 3, 0),
    ]
    comparison = metrics(built.report, MeasuredArm.COMPARISON)
    assert comparison["change"].value == 0.5
    assert (comparison["case.overview.change"].value, comparison["case.overview.change"].denominator) == (1.0, 1)
    assert comparison["case.greeting.change"].value == 0.0
    assert all(m.uncertainty is None for m in built.report.measurements)


def test_the_statistics_stand_beside_the_verdict_in_meta_never_as_measurements(evals: Path) -> None:
    given = inputs(evals)
    built = build_report(given)
    comparison = statistics_of(built.report)
    assert list(comparison) == list(STATISTICS)
    assert not set(STATISTICS) & {m.metric for m in built.report.measurements}
    assert list(built.report.meta_extra) == [FIGURES_KEY, STATISTICS_KEY]
    assert read(built.report_bytes)["meta"][STATISTICS_KEY]["runs"] == built.report.runs.to_json()
    expected = evidence(strata_of(built.scores))
    assert built.evidence == expected
    # statistics.md §C2: one case at 3/3 against 0/3, the other tied at all-pass, is p = 0.050.
    assert comparison["p_helps"].value == pytest.approx(0.05)
    assert comparison["p_harms"].value == pytest.approx(1.0)
    assert comparison["delta_pass_rate"].value == pytest.approx(0.5)
    assert comparison["delta_pass_rate"].denominator == 12
    low, high = comparison["delta_low_95"].value, comparison["delta_high_95"].value
    assert low is not None
    assert high is not None
    assert low < 0.5 < high
    assert (comparison["cases_improved"].value, comparison["cases_improved"].denominator) == (1, 2)
    assert comparison["cases_worsened"].value == 0
    assert comparison["min_detectable_effect"].value == expected.min_detectable_effect
    # The verdict is still the gate's.
    assert built.report.verdict.value == built.decision.verdict.value


def test_an_underpowered_design_writes_a_null_detectable_effect(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.attempt == 1)  # one run per arm: nothing reaches 5 %
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=1)))
    comparison = statistics_of(built.report)
    assert built.evidence is not None
    assert built.evidence.underpowered
    assert comparison["min_detectable_effect"].value is None
    assert comparison["p_helps"].value == pytest.approx(0.5)
    assert (comparison["delta_pass_rate"].denominator, comparison["delta_pass_rate"].unknown_count) == (4, 0)


def test_the_statistics_count_what_they_could_not_use(evals: Path) -> None:
    # overview has one recorded run of three per arm, so its pass is undecided and it is not compared.
    attempts = tuple(a for a in better_attempts() if a.attempt == 1 or a.case == "greeting")
    built = build_report(inputs(evals, attempts))
    comparison = statistics_of(built.report)
    assert (comparison["p_helps"].denominator, comparison["p_helps"].unknown_count) == (1, 1)
    assert (comparison["delta_pass_rate"].denominator, comparison["delta_pass_rate"].unknown_count) == (6, 6)
    change = metrics(built.report, MeasuredArm.COMPARISON)["change"]
    assert (change.denominator, change.unknown_count) == (1, 1)


def test_notes_are_at_most_four_of_at_most_two_hundred_characters(evals: Path) -> None:
    built = build_report(inputs(evals))
    assert built.notes == ("Faster: 24.2 s against 60.0 s per run",)  # totals over both cases per attempt
    assert len(built.notes) <= 4
    assert all(len(note) <= 200 for note in built.notes)


# --- limitations and partial -----------------------------------------------------------------------


def limitations_of(built: BuiltReport) -> Limitations:
    data = built.artifacts["limitations.json"]
    assert built.report.limitations.matches(data)
    return Limitations.parse(read(data))


def test_a_hosted_run_names_its_run_override(evals: Path) -> None:
    found = limitations_of(build_report(inputs(evals)))
    assert found.limitations == (*FIXED_LIMITATIONS, "Every case ran 3 times per arm, overriding the cases' runs.")
    assert found.partial is None


def test_without_an_override_only_the_fixed_sentences(evals: Path) -> None:
    found = limitations_of(build_report(inputs(evals, setup=RunSetup(runs=None))))
    assert found.limitations == FIXED_LIMITATIONS


def test_without_a_baseline_the_report_claims_no_change(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.arm is S)
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=3, baseline=False)))
    assert NO_BASELINE in limitations_of(built).limitations
    assert built.report.baseline is None
    assert built.report.coverage.baseline is None
    assert built.report.verdict is Verdict.INCONCLUSIVE
    assert built.report.ext_eval.headline.baseline_passed is None
    assert built.evidence is None
    assert all(m.arm is MeasuredArm.SUBJECT for m in built.report.measurements)
    assert "baseline-lock.json" not in built.artifacts


def test_different_doors_and_extra_sentences_are_named(evals: Path) -> None:
    setup = RunSetup(runs=3, door="default", baseline_door="other")
    extra = ("Receipt replay is not supported, so receipt graders fail.",)
    found = limitations_of(build_report(inputs(evals, setup=setup, extra_limitations=extra)))
    assert found.limitations[-2:] == ("The subject and baseline arms used different doors.", extra[0])


def test_a_subject_only_case_is_named_and_not_compared(tmp_path: Path) -> None:
    files = dict(TWO_CASES)
    files["overview/graders/used.md"] = '+++\ntype = "operation_used"\noperation = "repo-map"\n+++\n'
    del files["overview/graders/answer.md"]
    evals = write_cases(tmp_path / "evals", files)
    attempts = tuple(a for a in better_attempts() if not (a.case == "overview" and a.arm is B))
    built = build_report(inputs(evals, attempts))
    assert "Scored with the extension only and excluded from the change: overview." in limitations_of(built).limitations
    assert built.report.coverage.baseline is not None
    assert built.report.coverage.baseline.excluded == 1
    assert "case.overview.change" not in metrics(built.report, MeasuredArm.COMPARISON)


def test_runs_that_did_not_finish_make_the_report_partial(evals: Path) -> None:
    attempts = list(better_attempts())
    attempts[0] = attempt("greeting", S, 1, None, end=RunEnd.CANCELLED, seconds=None, cost=None)
    missing = attempts.pop()  # overview, baseline, attempt 3: never recorded
    built = build_report(inputs(evals, tuple(attempts)))
    assert limitations_of(built).partial == "2 runs did not finish"
    entry = next(
        r
        for r in RunsDocument.parse(read(built.artifacts["runs.json"])).runs
        if r.case == missing.case and r.attempt == 3 and r.arm.value == "baseline"
    )
    assert entry.outcome.value == "unknown"
    assert read(built.artifacts["grades/overview/baseline-3.json"])["outcome"] == "unknown"
    assert built.report.coverage.subject.cancelled == 1
    stopped = build_report(inputs(evals, tuple(attempts), partial="the operator stopped the run"))
    assert limitations_of(stopped).partial == "the operator stopped the run"


def test_errored_runs_count_as_refused_or_failed(evals: Path) -> None:
    attempts = list(better_attempts())
    attempts[0] = attempt("greeting", S, 1, False, end=RunEnd.ERRORED, reason="unconfined_host")
    attempts[1] = attempt("greeting", B, 1, False, end=RunEnd.ERRORED, reason="timeout")
    built = build_report(inputs(evals, tuple(attempts)))
    assert built.report.coverage.subject.refused == 1
    assert built.report.coverage.baseline is not None
    assert built.report.coverage.baseline.failed == 1
    assert attempts[0].coverage_word is OutcomeWord.REFUSED


def test_a_marginal_run_names_the_defaults(evals: Path) -> None:
    release = EventRef(id="55" * 32, pubkey=RUNNER, kind=3184)
    built = build_report(inputs(evals, defaults=Defaults(release=release, lock={"release": "x"})))
    assert built.report.ext_eval.defaults == release
    assert ArmLock.parse_bytes(built.artifacts["subject-lock.json"]).defaults == {"release": "x"}
    run_json = read(built.run_json)
    assert "defaults" not in read(run_json["subject_lock"])
    assert read(built.artifacts["subject-configuration.json"])["run"]["defaults"] == release.to_json()


def test_run_json_is_the_runners_record(evals: Path) -> None:
    built = build_report(inputs(evals))
    value = read(built.run_json)
    assert value["v"] == "openagents.ext-eval-run.v1"
    assert (value["author"], value["package"], value["component"], value["evaluator"]) == (
        AUTHOR,
        "repo-map-tests",
        "suite",
        RUNNER,
    )
    assert value["subject"] == "repo-map"
    assert value["subject_lock"].encode() == built.artifacts["subject-lock.json"]
    assert value["agent"] == {"digest": AGENT.digest, "size": 5}
    assert (value["runs"], value["baseline"], value["grants"]) == (3, True, ["read", "write"])
    assert (value["verdict"], value["partial"]) == ("pass", None)


# --- refusals and limits ---------------------------------------------------------------------------


def test_a_run_outside_the_plan_is_refused(evals: Path) -> None:
    extra = (*better_attempts(), attempt("overview", S, 4))
    with pytest.raises(ReportError, match="attempt 4, is not in the plan"):
        build_report(inputs(evals, extra))


def test_two_records_of_one_attempt_are_refused(evals: Path) -> None:
    with pytest.raises(ReportError, match="two records"):
        build_report(inputs(evals, (*better_attempts(), attempt("overview", S, 1))))


def test_subject_definition_bytes_must_be_the_definitions(evals: Path) -> None:
    with pytest.raises(ReportError, match="subject definition"):
        build_report(inputs(evals, subject_definition=b"{}"))


def test_a_gate_that_is_not_ext_eval_v2_shaped_is_refused(evals: Path) -> None:
    with pytest.raises(ReportError):
        build_report(inputs(evals, gate_file=b'{"id": "x"}'))


def many_cases(root: Path, count: int) -> BuiltReport:
    files = {f"c{n:03d}/prompt.md": '+++\nv = "openagents.eval-case.v1"\nruns = 2\n+++\nGo.\n' for n in range(count)}
    files.update({f"c{n:03d}/graders/g.md": REGEX for n in range(count)})
    evals = write_cases(root / f"evals{count}", files)
    attempts = tuple(attempt(f"c{n:03d}", arm, k, arm is S) for n in range(count) for arm in (S, B) for k in (1, 2))
    return build_report(inputs(evals, attempts, setup=RunSetup(runs=2)))


def test_statistics_are_left_out_before_the_report_outgrows_a_reader(tmp_path: Path) -> None:
    """Grow the suite until the reference measurements still fit in 64 KiB and the statistics would not."""
    count = 30
    while STATISTICS_LEFT_OUT not in (built := many_cases(tmp_path, count)).limitations.limitations:
        assert list(statistics_of(built.report)) == list(STATISTICS)
        count += 1
        assert count < 60, "no suite size reached the report's limit"
    assert Report.parse_bytes(built.report_bytes) == built.report
    assert statistics_of(built.report) == {}
    assert built.evidence is not None  # the page still shows them
    with pytest.raises(ReportError, match="beyond what a reader accepts"):
        many_cases(tmp_path, 60)
