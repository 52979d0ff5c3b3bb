"""Who a published result credits and what it says about the result it cites (wire.md §17), as pure rules.

A result credits its trainer only once the signed request is checked (`contracts.publication.verified_trainer`;
a hosted result without one credits nobody). A result citing another is a *check* (same suite, tool and
subject lock, another trainer: it confirms when the verdicts agree, else disputes), a *validation* (same tool
and lock, another suite of the same distribution) or a *transfer* (another distribution); anything else is
"not a check" or "not a validation" and is shown apart, never counted. A validation counts only when it is
independent (its suite released by someone other than the tool's publisher, after the tool) and Better.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import Release
from eval_runner.contracts.publication import Cites, Publication, verified_trainer


class Relation(StrEnum):
    """What a citing result is to the result it cites."""

    CONFIRMS = "confirms"
    DISPUTES = "disputes"
    NOT_A_CHECK = "not a check"
    VALIDATION = "validation"
    TRANSFER = "transfer"
    NOT_A_VALIDATION = "not a validation"


@dataclass(frozen=True, slots=True)
class Credit:
    """A citing result's relation to the cited one, whether it counts, and why, in plain words. For a
    validation or a transfer, `independent` says whether its suite came from someone else, later."""

    relation: Relation
    counts: bool
    why: str
    independent: bool | None = None


def trainer_of(result: Publication) -> str | None:
    """The trainer a result credits, or None when a hosted result's signed request is not at hand."""
    try:
        return verified_trainer(result)
    except ContractError:
        return None


def distribution(result: Publication) -> str:
    """The task distribution a result measured: `meta.ext_eval.distribution`, else the tool's id."""
    return result.report.ext_eval.distribution or result.report.subject.definition.id


def _same_tool(original: Publication, citing: Publication) -> str | None:
    """Why two results did not test the same tool under the same lock, or None when they did."""
    first, second = original.report.subject, citing.report.subject
    if (first.definition.id, first.definition.artifact.digest, first.definition.artifact.size) != (
        second.definition.id,
        second.definition.artifact.digest,
        second.definition.artifact.size,
    ):
        return "it tested another tool"
    if first.lock.digest != second.lock.digest:
        return "its subject lock differs (another Coder binary, tool bytes or adopted defaults)"
    return None


def check_credit(original: Publication, check: Publication) -> Credit:
    """A result citing `original` with `check`: confirms or disputes it, or is not a check (and why)."""
    different = _same_tool(original, check)
    if different is None and original.report.suite.digest != check.report.suite.digest:
        different = "it ran another test set"
    if different is None:
        first, second = trainer_of(original), trainer_of(check)
        if first is None or second is None:
            different = "a trainer can't be verified: a hosted result's signed request is missing"
        elif first == second:
            different = "the same trainer asked for both"
    if different is not None:
        return Credit(Relation.NOT_A_CHECK, False, different)
    verdict, was = check.report.verdict.value, original.report.verdict.value
    if verdict == was:
        return Credit(Relation.CONFIRMS, True, f"the same verdict ({verdict}) on a rerun by another trainer")
    return Credit(Relation.DISPUTES, True, f"a rerun by another trainer found {verdict}, not {was}")


def validation_credit(
    original: Publication, citing: Publication, *, suite_release: Release | None, subject_release: Release | None
) -> Credit:
    """A result citing `original` with `validates` or `transfer`. `suite_release` is the citing result's suite
    release and `subject_release` the tool's, as read from the relay (None when not found there)."""
    different = _same_tool(original, citing)
    if different is None and original.report.suite.digest == citing.report.suite.digest:
        different = "it ran the same test set (that would be a check)"
    if different is not None:
        return Credit(Relation.NOT_A_VALIDATION, False, different)
    marker = citing.cites.marker if citing.cites is not None else Cites.VALIDATES
    same = distribution(original) == distribution(citing)
    relation = Relation.VALIDATION if marker is Cites.VALIDATES and same else Relation.TRANSFER
    if suite_release is None or subject_release is None:
        what = "test set" if suite_release is None else "tool"
        return Credit(relation, False, f"the {what}'s release isn't on the relay, so independence can't be told", False)
    if suite_release.pubkey == subject_release.pubkey:
        return Credit(relation, False, "the tool's own publisher released the test set", False)
    if suite_release.created_at <= subject_release.created_at:
        return Credit(relation, False, "the test set was released before the tool", False)
    if relation is Relation.TRANSFER:
        return Credit(relation, False, "independent, on another task distribution (shown, not counted)", True)
    if citing.report.verdict.value != "pass":
        return Credit(relation, False, f"independent, but its verdict is {citing.report.verdict.value}", True)
    return Credit(relation, True, "independent (another publisher's test set, released later) and Better", True)


def credit(
    original: Publication,
    citing: Publication,
    *,
    suite_release: Release | None = None,
    subject_release: Release | None = None,
) -> Credit:
    """`citing`'s relation to `original`, by the marker it cites it with (a check, or a validation/transfer)."""
    if citing.cites is None or citing.cites.id != original.id:
        raise ValueError("the citing result does not cite the original")
    if citing.cites.marker is Cites.CHECK:
        return check_credit(original, citing)
    return validation_credit(original, citing, suite_release=suite_release, subject_release=subject_release)
