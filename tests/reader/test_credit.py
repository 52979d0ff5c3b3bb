"""The credit rules of wire.md §17 as pure functions over results that passed the reader checks (signed for real,
read with `read_publication`), and the listing's grouping by test set: a check confirms, disputes or is not a
check; a validation is independent (another publisher's test set, released after the tool) and counts only
when Better; a transfer is shown, never counted; results of different test sets are never in one group.
"""

from __future__ import annotations

import dataclasses

from eval_runner.contracts.package import Release
from eval_runner.contracts.publication import Citation, Cites, Publication, publication, read_publication
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Verdict, report_ref
from eval_runner.reader.credit import Relation, credit, distribution
from eval_runner.reader.listing import group
from tests.support.publication_events import RUNNER, key, signed
from tests.support.sample_reports import SUBJECT_RELEASE, SUITE_RELEASE, Spec, blob, report

OTHER_SUITE = EventRef(id="5e" * 32, pubkey="a1" * 32, kind=3184)


def result(
    *,
    verdict: Verdict = Verdict.PASS,
    suite: EventRef = SUITE_RELEASE,
    cites: Citation | None = None,
    distribution_id: str | None = None,
    lock: ArtifactRef | None = None,
    at: int = 1_790_000_000,
) -> Publication:
    """A non-hosted result by the runner (so it credits the evaluator), on `suite`'s bytes."""
    value = report(Spec(evaluator=RUNNER, verdict=verdict, suite_release=suite))
    if suite != SUITE_RELEASE:
        value = dataclasses.replace(
            value, suite=dataclasses.replace(blob(f"suite {suite.id}", "openagents.eval-suite.v1"), event=suite)
        )
    if distribution_id is not None:
        value = dataclasses.replace(value, ext_eval=dataclasses.replace(value.ext_eval, distribution=distribution_id))
    if lock is not None:
        value = dataclasses.replace(value, subject=dataclasses.replace(value.subject, lock=lock))
    return read_publication(signed(publication(report_ref(value)[0], cites=cites), at=at))


def by(trainer: str, found: Publication) -> Publication:
    """`found` as if a hosted run of `trainer` (its credit is what differs between two checks)."""
    return dataclasses.replace(found, report=dataclasses.replace(found.report, evaluator=trainer))


def release(pointer: EventRef, at: int) -> Release:
    return Release(pointer.id, pointer.pubkey, at, "x:y", "1", blob("manifest"))


def test_a_check_of_the_same_trainer_is_not_a_check_and_a_verdict_change_disputes() -> None:
    original = result()
    same = result(cites=Citation(Cites.CHECK, original.id), at=1_790_000_100)
    assert credit(original, same).relation is Relation.NOT_A_CHECK
    assert credit(original, same).why == "the same trainer asked for both"
    other_suite = result(suite=OTHER_SUITE, cites=Citation(Cites.CHECK, original.id))
    assert credit(original, other_suite).why == "it ran another test set"
    other_lock = result(cites=Citation(Cites.CHECK, original.id), lock=blob("another lock"))
    assert credit(original, other_lock).relation is Relation.NOT_A_CHECK
    assert "subject lock" in credit(original, other_lock).why


def test_a_validation_counts_only_when_independent_and_better() -> None:
    original = result()
    cites = Citation(Cites.VALIDATES, original.id)
    validation = result(suite=OTHER_SUITE, cites=cites)
    tool = release(SUBJECT_RELEASE, 100)
    later_by_another = release(OTHER_SUITE, 200)
    found = credit(original, validation, suite_release=later_by_another, subject_release=tool)
    assert (found.relation, found.independent, found.counts) == (Relation.VALIDATION, True, True)
    earlier = credit(original, validation, suite_release=release(OTHER_SUITE, 50), subject_release=tool)
    assert (earlier.independent, earlier.counts) == (False, False)
    own = dataclasses.replace(later_by_another, pubkey=SUBJECT_RELEASE.pubkey)
    assert credit(original, validation, suite_release=own, subject_release=tool).counts is False
    worse = result(suite=OTHER_SUITE, cites=cites, verdict=Verdict.FAIL)
    found = credit(original, worse, suite_release=later_by_another, subject_release=tool)
    assert (found.independent, found.counts) == (True, False)
    unknown = credit(original, validation, suite_release=None, subject_release=tool)
    assert unknown.counts is False
    assert "isn't on the relay" in unknown.why
    same_suite = result(cites=cites)
    assert credit(original, same_suite).relation is Relation.NOT_A_VALIDATION


def test_another_distribution_is_a_transfer_shown_but_not_counted() -> None:
    original = result()
    elsewhere = result(suite=OTHER_SUITE, cites=Citation(Cites.VALIDATES, original.id), distribution_id="elsewhere")
    assert distribution(elsewhere) == "elsewhere"
    assert distribution(original) == original.report.subject.definition.id
    found = credit(
        original, elsewhere, suite_release=release(OTHER_SUITE, 200), subject_release=release(SUBJECT_RELEASE, 1)
    )
    assert (found.relation, found.counts, found.independent) == (Relation.TRANSFER, False, True)


def test_results_are_grouped_by_test_set_with_who_cites_them() -> None:
    original = result(at=1_790_000_000)
    second = result(at=1_790_000_050)
    check = by(
        key("a checker").public_key().to_hex(), result(cites=Citation(Cites.CHECK, original.id), at=1_790_000_100)
    )
    validation = result(suite=OTHER_SUITE, cites=Citation(Cites.VALIDATES, original.id), at=1_790_000_200)
    releases = {SUBJECT_RELEASE.id: release(SUBJECT_RELEASE, 1), OTHER_SUITE.id: release(OTHER_SUITE, 2)}
    listing = group([validation, check, second, original], original.report.subject.definition, releases, 3)
    assert listing.unreadable == 3
    assert [g.suite_digest for g in listing.groups] == [original.report.suite.digest, validation.report.suite.digest]
    first = listing.groups[0]
    assert [entry.result.id for entry in first.entries] == [original.id, second.id, check.id]
    assert first.release is None  # the sample suite release is not among those read
    cited = first.entries[0].citations
    assert [(c.result.id, c.credit.relation) for c in cited] == [
        (check.id, Relation.CONFIRMS),
        (validation.id, Relation.VALIDATION),
    ]
    assert listing.groups[1].release == releases[OTHER_SUITE.id]
    other_tool = dataclasses.replace(original.report.subject.definition, id=f"{RUNNER}:another/tool")
    assert group([original], other_tool, releases).groups == ()
