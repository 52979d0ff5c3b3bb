"""The published result: a kind-3189 `openagents.eval-publication.v1` with the ext-eval profile (wire.md §16).

A publication is how a result becomes public evidence, and readers credit trainers and count checks from
it alone: the report rides inline (`meta.ext_eval_report`, its exact bytes) and a hosted run's signed
request beside it (`meta.ext_eval_request`), because relays keep no 25920. So the reader re-derives
everything from the signed event, in the reference's order (§16.3), and refuses the first thing that
does not hold; the builder refuses to build what its own reader would refuse. Codes are the reference's
(`eval_ext::parse_publication`; decisions.md, "Report-side contracts").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.ext_eval import REQUEST_KIND, event_pointer
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.report import MAX_REPORT_BYTES, REPORT_SCHEMA, Report
from eval_runner.contracts.strict_json import JsonValue, canonical, read
from eval_runner.nostr.errors import EventError
from eval_runner.nostr.event import Event, tag_values

PUBLICATION_SCHEMA = "openagents.eval-publication.v1"
PUBLICATION_KIND = 3189
EVAL_MARKER = "oa:eval:v1"
PROFILE_MARKER = "oa:ext-eval:v1"
#: The `e` tag markers a result may carry (4th position); any other, or none, is refused.
E_MARKERS = ("suite", "subject", "check", "validates", "transfer", "request")
#: The inline signed request, serialised as compact JSON, is at most 96 KiB.
MAX_REQUEST_BYTES = 98_304
#: The largest `["EVENT", event]` frame the runner sends; the relay's own limit is 128 KiB.
MAX_EVENT_MESSAGE_BYTES = 128_000

_KEYS = ("v", "requires", "report", "subject", "supersedes", "meta")


class Cites(StrEnum):
    """How a result relates to the earlier publication it names: a rerun on the same suite (`check`),
    a second suite on the same distribution (`validates`), or on another one (`transfer`)."""

    CHECK = "check"
    VALIDATES = "validates"
    TRANSFER = "transfer"


@dataclass(frozen=True, slots=True)
class Citation:
    marker: Cites
    id: str


@dataclass(frozen=True, slots=True)
class Unsigned:
    """An event's kind, tags and content, ready for `nostr.event.sign` (the signer is the evaluator)."""

    kind: int
    tags: tuple[tuple[str, ...], ...]
    content: str


@dataclass(frozen=True, slots=True)
class Publication:
    """A 3189 that passed every reader check."""

    id: str
    evaluator: str
    created_at: int
    report_ref: ArtifactRef
    report: Report
    report_bytes: bytes
    subject: DefinitionRef
    supersedes: tuple[EventRef, ...]
    suite_release: EventRef
    subject_release: EventRef | None
    cites: Citation | None
    #: A hosted result's signed request, already checked; None when not hosted or not carried inline.
    request: Event | None

    @property
    def trainer(self) -> str:
        """Whom the result credits: the requester of a hosted run, otherwise the evaluator."""
        return self.report.trainer


def _mismatch(path: str, message: str) -> ContractError:
    return ContractError(Code.IDENTITY_MISMATCH, path, message)


def request_size(request: Event) -> int:
    """Bytes of the request as compact JSON in NIP-01 field order (how the reference measures it)."""
    text = json.dumps(request.to_json(), ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def check_request(report: Report, request: Event, path: str = "meta.ext_eval_request") -> None:
    """The request a hosted report names: that exact signed 25920, sent to the report's evaluator.

    A reader runs this before crediting the requester, over the inline copy or one it holds (§17).
    """
    requester = report.ext_eval.requester
    if requester is None:
        raise _mismatch(path, "only a hosted result carries a request")
    size = request_size(request)
    if size > MAX_REQUEST_BYTES:
        raise ContractError(Code.LIMIT_EXCEEDED, path, f"request is {size} bytes; at most {MAX_REQUEST_BYTES}")
    if (request.id, request.pubkey, request.kind) != (requester.id, requester.pubkey, REQUEST_KIND):
        raise _mismatch(path, "is not the request meta.ext_eval.requester names")
    try:
        request.verify()
    except EventError as error:
        raise _mismatch(path, f"does not verify: {error.message}") from None
    if tag_values(request, "p") != (report.evaluator,):
        raise _mismatch(shape.at(path, "tags"), "the request was not sent to the result's evaluator alone")


def publication(report_bytes: bytes, *, cites: Citation | None = None, request: Event | None = None) -> Unsigned:
    """The 3189 parts for exact report bytes (at most 64 KiB), in the reference's tag order.

    The report names what the tags carry: the suite's release (required: publish the suite first),
    the subject's release when published, and a hosted run's requester (`e` request + `p`). `request`
    is that run's signed 25920, carried inline when given.
    """
    report = Report.parse_bytes(report_bytes)
    if request is not None:
        check_request(report, request, "request")
    suite = report.suite.event
    if suite is None:
        raise shape.fail("report.suite.event", "publish the suite's release before its results")
    if cites is not None:
        shape.hex64(cites.id, "cites.id")
    text = report_bytes.decode("utf-8")
    digest = report_ref_of(report_bytes)
    meta: dict[str, JsonValue] = {"ext_eval_report": text}
    if request is not None:
        meta["ext_eval_request"] = request.to_json()
    content = {
        "v": PUBLICATION_SCHEMA,
        "requires": [],
        "report": digest.to_json(),
        "subject": read(report_bytes)["subject"]["definition"],
        "supersedes": [],
        "meta": meta,
    }
    tags: list[tuple[str, ...]] = [
        ("t", EVAL_MARKER),
        ("t", PROFILE_MARKER),
        ("x", digest.digest.removeprefix("sha256:")),
        ("e", suite.id, "", "suite"),
    ]
    if report.subject.definition.event is not None:
        tags.append(("e", report.subject.definition.event.id, "", "subject"))
    if cites is not None:
        tags.append(("e", cites.id, "", cites.marker.value))
    requester = report.ext_eval.requester
    if requester is not None:
        tags.append(("e", requester.id, "", "request"))
        tags.append(("p", requester.pubkey))
    return Unsigned(kind=PUBLICATION_KIND, tags=tuple(tags), content=canonical(content).decode("utf-8"))


def report_ref_of(report_bytes: bytes) -> ArtifactRef:
    """The ArtifactRef a publication names its inline report by."""
    return ArtifactRef.of_bytes(report_bytes, "application/json", REPORT_SCHEMA)


def read_publication(event: Event) -> Publication:
    """Every reader check of §16.3, in order, over a signed event."""
    if event.kind != PUBLICATION_KIND:
        raise _mismatch("kind", f"a result is a {PUBLICATION_KIND}")
    try:
        event.verify()
    except EventError as error:
        raise _mismatch("sig", f"the event does not verify: {error.message}") from None
    markers = sorted(value for value in tag_values(event, "t") if value.startswith("oa:"))
    if markers != sorted((EVAL_MARKER, PROFILE_MARKER)):
        raise _mismatch("tags", f"a result carries exactly the markers {EVAL_MARKER} and {PROFILE_MARKER}")
    found = shape.closed(read(event.content), "", _KEYS, unknown=Code.UNSUPPORTED_FEATURE)
    shape.version(found["v"], "v", PUBLICATION_SCHEMA)
    shape.empty_requires(found["requires"], "requires")
    report_ref = ArtifactRef.parse(found["report"], "report")
    if report_ref.schema != REPORT_SCHEMA:
        raise _mismatch("report.schema", f"must be {REPORT_SCHEMA!r}")
    if tag_values(event, "x") != (report_ref.digest.removeprefix("sha256:"),):
        raise _mismatch("tags", "needs exactly one x tag, the report digest's hex")
    subject = DefinitionRef.parse(found["subject"], "subject")
    supersedes = tuple(
        event_pointer(item, at, PUBLICATION_KIND) for at, item in shape.indexed(found["supersedes"], "supersedes")
    )
    meta = shape.closed(
        found["meta"], "meta", (), ("ext_eval_report", "ext_eval_request"), unknown=Code.UNSUPPORTED_FEATURE
    )
    text = meta.get("ext_eval_report")
    if not isinstance(text, str):
        raise ContractError(Code.CONTENT_UNAVAILABLE, "meta.ext_eval_report", "the report's bytes are not carried")
    report_bytes = text.encode("utf-8")
    if len(report_bytes) > MAX_REPORT_BYTES:
        raise ContractError(
            Code.LIMIT_EXCEEDED, "meta.ext_eval_report", f"is {len(report_bytes)} bytes; at most {MAX_REPORT_BYTES}"
        )
    if not report_ref.matches(report_bytes):
        raise _mismatch("meta.ext_eval_report", "the bytes are not the report the body names")
    report = Report.parse_bytes(report_bytes)
    if report.evaluator != event.pubkey:
        raise _mismatch("pubkey", "the signer is not the report's evaluator")
    request = None
    if "ext_eval_request" in meta:
        try:
            request = Event.from_json(meta["ext_eval_request"])
        except EventError as error:
            raise shape.fail("meta.ext_eval_request", f"is not a signed event: {error.message}") from None
        check_request(report, request)
    if canonical(read(report_bytes)["subject"]["definition"]) != canonical(found["subject"]):
        raise _mismatch("subject", "is not the report's subject.definition")
    suite_release = report.suite.event
    if suite_release is None:
        raise shape.fail("report.suite.event", "a published result names its suite's release")
    subject_release = report.subject.definition.event
    cites = _check_tags(event, report, suite_release, subject_release)
    return Publication(
        id=event.id,
        evaluator=event.pubkey,
        created_at=event.created_at,
        report_ref=report_ref,
        report=report,
        report_bytes=report_bytes,
        subject=subject,
        supersedes=supersedes,
        suite_release=suite_release,
        subject_release=subject_release,
        cites=cites,
        request=request,
    )


def _check_tags(
    event: Event, report: Report, suite_release: EventRef, subject_release: EventRef | None
) -> Citation | None:
    """The `e` and `p` tag rules of §16.2 against what the report names."""
    tagged: dict[str, list[str]] = {}
    for index, tag in enumerate(event.tags):
        if tag[0] != "e":
            continue
        marker = tag[3] if len(tag) > 3 else ""
        if marker not in E_MARKERS:
            raise shape.fail(
                f"tags[{index}]", f"an e tag's marker must be one of {E_MARKERS}", Code.UNSUPPORTED_FEATURE
            )
        tagged.setdefault(marker, []).append(shape.hex64(tag[1] if len(tag) > 1 else "", f"tags[{index}][1]"))

    def one(marker: str) -> str | None:
        ids = tagged.get(marker, [])
        if len(ids) > 1:
            raise shape.fail("tags", f"more than one {marker!r} e tag")
        return ids[0] if ids else None

    suite = one("suite")
    if suite is None:
        raise shape.fail("tags", "a result has an e tag for its suite's release")
    if suite != suite_release.id:
        raise _mismatch("tags", "the suite e tag is not the report's suite release")
    if one("subject") != (None if subject_release is None else subject_release.id):
        raise _mismatch("tags", "the subject e tag must name the subject's release, exactly when there is one")
    links = [Citation(Cites(marker), found) for marker in Cites if (found := one(marker.value)) is not None]
    if len(links) > 1:
        raise shape.fail("tags", "a result cites at most one of check, validates and transfer")
    if links and links[0].id == event.id:
        raise shape.fail("tags", "a result cannot cite itself")
    request = one("request")
    people = tag_values(event, "p")
    requester = report.ext_eval.requester
    if requester is not None:
        if request != requester.id or people != (requester.pubkey,):
            raise _mismatch("tags", "a hosted result carries the request's e tag and the requester's p tag")
    elif request is not None or people:
        raise _mismatch("tags", "only a hosted result names a requester")
    return links[0] if links else None


def check_relay_size(event: Event) -> None:
    """A publication the relay could not hold is a failed publish (`too_large`), not a refusal."""
    frame = json.dumps(["EVENT", event.to_json()], ensure_ascii=False, separators=(",", ":"))
    size = len(frame.encode("utf-8", "surrogatepass"))
    if size > MAX_EVENT_MESSAGE_BYTES:
        raise ContractError(Code.TOO_LARGE, "", "the result is too large for the relay to hold")


def verified_trainer(result: Publication, requests: tuple[Event, ...] = ()) -> str:
    """The trainer to credit, after checking a hosted result's request: the inline one (checked on read),
    else one of `requests` the reader holds. Missing → `content_unavailable`."""
    requester = result.report.ext_eval.requester
    if requester is not None and result.request is None:
        held = next((request for request in requests if request.id == requester.id), None)
        if held is None:
            raise ContractError(
                Code.CONTENT_UNAVAILABLE, "request", "the hosted result's signed request is not at hand"
            )
        check_request(result.report, held, "request")
    return result.trainer
