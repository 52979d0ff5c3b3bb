"""Coder's defaults as a runtime reads them: the `<root>:coder-defaults` releases, the documents they pin,
and the lock a run records (runner.md §12, wire.md §13.2 `defaults`, §13.4).

An operator adopts a tool by publishing three things: an `openagents.eval-admission.v1` decision that
admits it, a `coder-defaults` manifest (`openagents.package.v1`) whose `dependencies` name the adopted
tools' releases and whose `provenance.receipts` cite the admissions, and a signed `3184` release pinning
the manifest. The manifest and admissions are documents held by digest (a directory, or NIP-94 locators),
never events, so nothing here fetches: a caller holds the events and the bytes, `wanted_digests` says
which bytes it still needs, and `current` says what is admitted as of now. Every check is the reference's
(`xp_ledger::defaults`, `eval_ext::parse_admission`/`parse_release`): a dependency whose admission is
missing, expired, not an `admit`, or about another release is named `lapsed` and admits nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import RELEASE_KIND, Manifest, read_release
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes, read
from eval_runner.nostr.event import Event

ADMISSION_SCHEMA: Final = "openagents.eval-admission.v1"
LOCK_SCHEMA: Final = "openagents.coder-defaults-lock.v1"
DEFAULTS_SLUG: Final = "coder-defaults"
#: The root key of the `coder-defaults` package record (`packages/coder-defaults/package.json`).
DEFAULT_ROOT: Final = "51428dd2352a6008e0741e894238a5cbab34beff61e32463b9b70b2ad3ae0715"
#: Most bytes one document may have (`xp_ledger::eval::MAX_DOCUMENT_BYTES`).
MAX_DOCUMENT_BYTES: Final = 1024 * 1024
#: NIP-94 file metadata: where a document can be fetched, by its digest.
LOCATOR_KIND: Final = 1063

_ADMISSION_KEYS: Final = (
    "v",
    "requires",
    "subject",
    "reports",
    "validation",
    "marginal",
    "regression",
    "reliability",
    "authority",
    "stakes",
    "policy",
    "scope",
    "decision",
    "issuer",
    "expires_at",
    "meta",
)
_REQUIRED_ADMISSION_KEYS: Final = (
    "v",
    "requires",
    "subject",
    "reports",
    "policy",
    "scope",
    "decision",
    "issuer",
    "expires_at",
)
DECISIONS: Final = ("admit", "reject", "inconclusive")
_STAKES: Final = (
    ("severity", ("low", "moderate", "severe")),
    ("authority", ("none", "read", "write", "act", "spend")),
    ("reversibility", ("reversible", "costly", "irreversible")),
)

Documents = Mapping[str, bytes]


def package_of(root: str) -> str:
    """`<root>:coder-defaults`."""
    return f"{root}:{DEFAULTS_SLUG}"


def documents(items: Iterable[bytes]) -> dict[str, bytes]:
    """`items` keyed by their `sha256:` digests; anything over the document bound is dropped."""
    return {digest_bytes(data): data for data in items if len(data) <= MAX_DOCUMENT_BYTES}


# --- the admission ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """A checked `openagents.eval-admission.v1` decision. Digests are `sha256:`; the optional evidence
    (`marginal`, `regression`, `reliability`, `authority`, `stakes`) is checked for shape and not kept."""

    subject: DefinitionRef
    reports: tuple[str, ...]
    validation: tuple[str, ...]
    decision: str
    issuer: str
    expires_at: int

    @classmethod
    def parse_bytes(cls, data: bytes) -> Admission:
        """The admission in `data`; `ContractError` naming the first field that fails, and `not_admitted`
        for an `admit` that cites no externally validating result (the reference's rule)."""
        found = shape.closed(
            read(data, max_bytes=MAX_DOCUMENT_BYTES),
            "",
            _REQUIRED_ADMISSION_KEYS,
            tuple(key for key in _ADMISSION_KEYS if key not in _REQUIRED_ADMISSION_KEYS),
            unknown=Code.UNSUPPORTED_FEATURE,
        )
        shape.version(found["v"], "v", ADMISSION_SCHEMA)
        shape.empty_requires(found["requires"], "requires")
        subject = DefinitionRef.parse(found["subject"], "subject")
        reports = _digests(found["reports"], "reports")
        validation = () if found.get("validation") is None else _digests(found["validation"], "validation")
        for key in ("marginal", "regression", "reliability"):
            if found.get(key) is not None:
                ArtifactRef.parse(found[key], key)
        if found.get("authority") is not None:
            pair = shape.closed(found["authority"], "authority", ("before", "after"), unknown=Code.UNSUPPORTED_FEATURE)
            for key in ("before", "after"):
                ArtifactRef.parse(pair[key], shape.at("authority", key))
        if found.get("stakes") is not None:
            stakes = shape.closed(
                found["stakes"], "stakes", [key for key, _ in _STAKES], unknown=Code.UNSUPPORTED_FEATURE
            )
            for key, words in _STAKES:
                word = stakes[key]
                if not isinstance(word, str):
                    raise shape.fail(shape.at("stakes", key), "must be a string")
                shape.choice(word, shape.at("stakes", key), words, Code.UNSUPPORTED_FEATURE)
        DefinitionRef.parse(found["policy"], "policy")
        ArtifactRef.parse(found["scope"], "scope")
        decision = found["decision"]
        if not isinstance(decision, str):
            raise shape.fail("decision", "must be a string")
        shape.choice(decision, "decision", DECISIONS, Code.UNSUPPORTED_FEATURE)
        if decision == "admit" and not validation:
            raise shape.fail(
                "validation",
                "an admit cites at least one externally validating result in validation",
                Code.NOT_ADMITTED,
            )
        issuer = shape.hex64(found["issuer"], "issuer")
        expires_at = shape.integer(found["expires_at"], "expires_at", low=0)
        return cls(subject, reports, validation, decision, issuer, expires_at)


def _digests(value: JsonValue, path: str) -> tuple[str, ...]:
    return tuple(ArtifactRef.parse(item, at).digest for at, item in shape.indexed(value, path))


# --- the release -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DefaultsRelease:
    """A checked `3184` of a defaults package with its manifest: the adopted releases (`dependencies`)
    and the admissions its provenance cites (receipts under the admission schema)."""

    event: Event
    package: str
    manifest: Manifest
    admissions: tuple[ArtifactRef, ...]

    @property
    def pointer(self) -> EventRef:
        return EventRef(id=self.event.id, pubkey=self.event.pubkey, kind=self.event.kind)


def manifest_ref(event: Event) -> ArtifactRef:
    """The manifest a release pins (`ContractError` when the event is not a release that checks)."""
    if event.kind != RELEASE_KIND:
        raise shape.fail("kind", f"a release is a {RELEASE_KIND}", Code.IDENTITY_MISMATCH)
    return read_release(event).manifest


def read_defaults_release(event: Event, manifest: bytes) -> DefaultsRelease:
    """`event` read against the exact bytes of the manifest it pins."""
    release = read_release(event)
    if event.kind != RELEASE_KIND:
        raise shape.fail("kind", f"a release is a {RELEASE_KIND}", Code.IDENTITY_MISMATCH)
    if not release.manifest.matches(manifest):
        raise shape.fail("manifest", "the bytes are not the ones the release pins", Code.IDENTITY_MISMATCH)
    parsed = Manifest.parse(read(manifest, max_bytes=MAX_DOCUMENT_BYTES), "manifest")
    if parsed.package != release.package:
        raise shape.fail("manifest.package", "the manifest is another package's", Code.IDENTITY_MISMATCH)
    admissions = []
    for at, receipt in enumerate(parsed.provenance.receipts):
        try:
            artifact = ArtifactRef.parse(receipt, f"manifest.provenance.receipts[{at}]")
        except ContractError:
            continue
        if artifact.schema == ADMISSION_SCHEMA:
            admissions.append(artifact)
    return DefaultsRelease(event=event, package=release.package, manifest=parsed, admissions=tuple(admissions))


def wanted_digests(event: Event, held: Documents) -> tuple[str, ...]:
    """The digests a reader needs to read `event`: its manifest, then (once the manifest is held) every
    receipt the manifest cites. A release that does not check wants nothing."""
    try:
        ref = manifest_ref(event)
    except ContractError:
        return ()
    out = [ref.digest]
    manifest = held.get(ref.digest)
    if manifest is not None:
        try:
            value = read(manifest, max_bytes=MAX_DOCUMENT_BYTES)
        except ContractError:
            return tuple(out)
        provenance = value.get("provenance") if isinstance(value, dict) else None
        receipts = provenance.get("receipts") if isinstance(provenance, dict) else None
        for receipt in receipts if isinstance(receipts, list) else []:
            try:
                out.append(ArtifactRef.parse(receipt, "receipt").digest)
            except ContractError:
                continue
    return tuple(out)


def defaults_releases(events: Sequence[Event], package: str, held: Documents) -> list[DefaultsRelease]:
    """The releases of `package` among `events` that check against a manifest `held` holds, each once,
    oldest first (by `created_at`, then id)."""
    seen: set[str] = set()
    out = []
    for event in events:
        if event.kind != RELEASE_KIND or event.id in seen:
            continue
        seen.add(event.id)
        try:
            manifest = held.get(manifest_ref(event).digest)
            if manifest is None:
                continue
            release = read_defaults_release(event, manifest)
        except ContractError:
            continue
        if release.package == package:
            out.append(release)
    out.sort(key=lambda release: (release.event.created_at, release.event.id))
    return out


# --- what is admitted now, and the lock a run records -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted:
    """One adopted tool: its release, the component the admission names, the admission's digest, and
    when the admission lapses (unix seconds)."""

    subject: EventRef
    definition: str
    admission: str
    expires_at: int

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "subject": self.subject.to_json(),
            "definition": self.definition,
            "admission": self.admission,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True, slots=True)
class Defaults:
    """The defaults as of one moment: the newest valid release, its version label and manifest digest,
    the dependencies a live admission admits (manifest order), and those none does (`lapsed`)."""

    release: EventRef
    version: str
    manifest: str
    admitted: tuple[Admitted, ...]
    lapsed: tuple[str, ...]

    def subjects(self) -> tuple[str, ...]:
        """The adopted tools' release ids."""
        return tuple(item.subject.id for item in self.admitted)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "v": LOCK_SCHEMA,
            "requires": [],
            "release": self.release.to_json(),
            "version": self.version,
            "manifest": self.manifest,
            "admitted": [item.to_json() for item in self.admitted],
            "lapsed": list(self.lapsed),
        }

    def lock_document(self) -> bytes:
        """The lock a run records (JCS bytes), so a reader can tell which defaults both arms held."""
        return canonical(self.to_json())

    def lock_ref(self) -> ArtifactRef:
        return ArtifactRef.of_bytes(self.lock_document(), "application/json", LOCK_SCHEMA)

    @classmethod
    def parse_lock(cls, data: bytes) -> Defaults:
        """A lock a run recorded, read back (closed, typed errors)."""
        keys = ("v", "requires", "release", "version", "manifest", "admitted", "lapsed")
        found = shape.closed(read(data, max_bytes=MAX_DOCUMENT_BYTES), "", keys, unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], "v", LOCK_SCHEMA)
        shape.empty_requires(found["requires"], "requires")
        admitted = []
        for at, item in shape.indexed(found["admitted"], "admitted"):
            entry = shape.closed(
                item, at, ("subject", "definition", "admission", "expires_at"), unknown=Code.UNSUPPORTED_FEATURE
            )
            admitted.append(
                Admitted(
                    subject=EventRef.parse(entry["subject"], shape.at(at, "subject"), kind=RELEASE_KIND),
                    definition=shape.string(entry["definition"], shape.at(at, "definition"), min_bytes=1),
                    admission=shape.digest(entry["admission"], shape.at(at, "admission")),
                    expires_at=shape.integer(entry["expires_at"], shape.at(at, "expires_at"), low=0),
                )
            )
        return cls(
            release=EventRef.parse(found["release"], "release", kind=RELEASE_KIND),
            version=shape.string(found["version"], "version"),
            manifest=shape.digest(found["manifest"], "manifest"),
            admitted=tuple(admitted),
            lapsed=tuple(shape.string(item, at) for at, item in shape.indexed(found["lapsed"], "lapsed")),
        )


def current(events: Sequence[Event], package: str, held: Documents, now: int) -> Defaults | None:
    """The defaults as of `now`: the newest release of `package` among `events` whose manifest `held`
    holds, each dependency admitted only by a live `admit` it cites that `held` also holds. None when no
    release checks."""
    releases = defaults_releases(events, package, held)
    if not releases:
        return None
    newest = releases[-1]
    admissions: list[tuple[str, Admission]] = []
    for ref in newest.admissions:
        data = held.get(ref.digest)
        if data is None:
            continue
        try:
            admissions.append((ref.digest, Admission.parse_bytes(data)))
        except ContractError:
            continue
    admitted = []
    lapsed = []
    for dependency in newest.manifest.dependencies:
        live = next(
            (
                (digest, admission)
                for digest, admission in admissions
                if admission.decision == "admit"
                and admission.expires_at > now
                and admission.subject.event is not None
                and admission.subject.event.id == dependency
            ),
            None,
        )
        if live is None:
            lapsed.append(dependency)
            continue
        digest, admission = live
        event = admission.subject.event
        assert event is not None  # the search above requires it
        admitted.append(
            Admitted(
                subject=EventRef(id=event.id, pubkey=event.pubkey, kind=RELEASE_KIND),
                definition=admission.subject.id,
                admission=digest,
                expires_at=admission.expires_at,
            )
        )
    manifest = held[manifest_ref(newest.event).digest]
    return Defaults(
        release=newest.pointer,
        version=newest.manifest.version,
        manifest=digest_bytes(manifest),
        admitted=tuple(admitted),
        lapsed=tuple(lapsed),
    )
