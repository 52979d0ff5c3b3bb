"""A tool's published results, grouped by the test set they ran, each with the checks and validations that cite
it (wire.md §16.4 "Listing", §17). Results of different test sets are never ranked against each other
(NIP-EVAL): a group is one suite digest, its results in the order they were published.

Readers fetch `{"kinds": [3189], "#t": ["oa:ext-eval:v1"]}`, read every event with the reader checks, keep
those whose subject is the tool (id and artifact digest, as the runner matches a tool), and credit every
result that cites one of them. A result that does not read is counted, never shown as evidence.

What one listing asks of the relay is bounded: at most `RESULTS_LIMIT` results (the newest, as a relay
answers a `limit`; the listing says when the bound was reached, so older ones may be missing) and the
releases they name in queries of at most `IDS_PER_QUERY` ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import RELEASE_KIND, Release, read_release
from eval_runner.contracts.publication import PROFILE_MARKER, PUBLICATION_KIND, Publication, read_publication
from eval_runner.contracts.refs import DefinitionRef, EventRef
from eval_runner.nostr import Event, Filter
from eval_runner.reader.credit import Credit, credit, trainer_of
from eval_runner.reader.verify import Relay, query

#: Published results one listing reads at most (a relay gives the newest).
RESULTS_LIMIT: Final = 500
#: Release ids asked for in one query.
IDS_PER_QUERY: Final = 100


@dataclass(frozen=True, slots=True)
class Citation:
    """A result citing a listed one, and what it is to it."""

    result: Publication
    credit: Credit


@dataclass(frozen=True, slots=True)
class Entry:
    """One published result of the tool: whom it credits (None: not verifiable) and who cites it."""

    result: Publication
    trainer: str | None
    citations: tuple[Citation, ...]


@dataclass(frozen=True, slots=True)
class SuiteGroup:
    """The results that ran one test set (by its suite digest), oldest first, and its release when read."""

    suite_digest: str
    release: Release | None
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Listing:
    """A tool's results by test set, how many published results did not pass the reader checks, and whether
    the relay gave as many results as one listing reads (`limit_reached`: older ones may be left out)."""

    subject: DefinitionRef
    groups: tuple[SuiteGroup, ...]
    unreadable: int
    limit_reached: bool = False


def tested(result: Publication, subject: DefinitionRef) -> bool:
    """Did `result` test the tool `subject` names (id and artifact digest)?"""
    found = result.report.subject.definition
    return (found.id, found.artifact.digest) == (subject.id, subject.artifact.digest)


def read_all(events: Sequence[Event]) -> tuple[list[Publication], int]:
    """Every event that passes the reader checks (once each), and how many did not."""
    read: dict[str, Publication] = {}
    bad: set[str] = set()
    for event in events:
        if event.id in read or event.id in bad:
            continue
        try:
            read[event.id] = read_publication(event)
        except ContractError:
            bad.add(event.id)
    return list(read.values()), len(bad)


def group(
    results: Sequence[Publication], subject: DefinitionRef, releases: Mapping[str, Release], unreadable: int = 0
) -> Listing:
    """The pure part: `results` (all readable ones, any tool) grouped for `subject`, with `releases` (3184s by
    id) to name each test set and tell whether a validation is independent."""
    citing: dict[str, list[Publication]] = {}
    for result in results:
        if result.cites is not None:
            citing.setdefault(result.cites.id, []).append(result)
    groups: dict[str, list[Entry]] = {}
    for result in sorted((r for r in results if tested(r, subject)), key=lambda r: (r.created_at, r.id)):
        citations = tuple(
            Citation(
                other,
                credit(
                    result,
                    other,
                    suite_release=_release(releases, other.suite_release),
                    subject_release=_release(releases, other.subject_release),
                ),
            )
            for other in sorted(citing.get(result.id, ()), key=lambda r: (r.created_at, r.id))
        )
        groups.setdefault(result.report.suite.digest, []).append(Entry(result, trainer_of(result), citations))
    return Listing(
        subject=subject,
        groups=tuple(
            SuiteGroup(digest, _release(releases, entries[0].result.suite_release), tuple(entries))
            for digest, entries in groups.items()
        ),
        unreadable=unreadable,
    )


def _release(releases: Mapping[str, Release], pointer: EventRef | None) -> Release | None:
    """The release a pointer names, when read and signed by the key the pointer names."""
    found = None if pointer is None else releases.get(pointer.id)
    return found if found is not None and pointer is not None and found.pubkey == pointer.pubkey else None


async def list_results(
    relay: Relay, subject: DefinitionRef, *, limit: int = RESULTS_LIMIT, ids_per_query: int = IDS_PER_QUERY
) -> Listing:
    """The published results of `subject` on `relay` (of the newest `limit` results), grouped by test set."""
    events = await query(relay, Filter.build(kinds=[PUBLICATION_KIND], tags={"t": [PROFILE_MARKER]}, limit=limit))
    results, unreadable = read_all(events)
    wanted = {
        pointer.id
        for result in results
        for pointer in (result.suite_release, result.subject_release)
        if pointer is not None
    }
    releases: dict[str, Release] = {}
    ids = sorted(wanted)
    for start in range(0, len(ids), ids_per_query):
        chunk = ids[start : start + ids_per_query]
        for event in await query(relay, Filter.build(ids=chunk, kinds=[RELEASE_KIND], limit=len(chunk))):
            try:
                release = read_release(event)
            except ContractError:
                continue
            releases[release.id] = release
    listing = group(results, subject, releases, unreadable)
    return dataclasses.replace(listing, limit_reached=len(events) >= limit)
