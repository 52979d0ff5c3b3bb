"""`meta.ext_eval`: the extension-evaluation profile record `openagents.ext-eval.v1` (wire.md §13.2).

Every report the runner writes carries this record; it is what a reader uses to credit a trainer
(`requester`), to tell a check from a rerun on different footing (`reliance`), and to weigh the claim
(`identity`, `distribution`, `defaults`). The optional keys arrived after reports were already published,
so a parsed record writes back exactly what it read and an older report keeps its digest. Codes are the
reference's (`eval_ext::parse_profile`); both are in decisions.md ("Report-side contracts").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eval_runner.contracts import shape
from eval_runner.contracts.case_id import case_id
from eval_runner.contracts.errors import Code
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue

PROFILE_SCHEMA = "openagents.ext-eval.v1"
MAX_CASES = 256
MAX_IDENTITY_BYTES = 256
REQUEST_KIND = 25920
RELEASE_KIND = 3184

RELIANCE_KEYS = ("runner", "host", "door", "model", "agent", "selector", "graders")
_REQUIRED = ("v", "gate", "cases", "headline", "requester")
_OPTIONAL = ("reliance", "identity", "distribution", "defaults")


class CaseKind(StrEnum):
    """Whether the extension ought to act on a case."""

    SHOULD_FIRE = "should-fire"
    SHOULD_NOT_FIRE = "should-not-fire"


class Identity(StrEnum):
    """The strongest identity the subject has; reproducibility cannot be stronger."""

    CONTENT = "content"
    VERSION = "version"
    ENDPOINT = "endpoint"
    UNRESOLVED = "unresolved"


def case_kind(value: JsonValue, path: str) -> CaseKind:
    """`should-fire` | `should-not-fire`; another word is a feature this profile lacks."""
    if not isinstance(value, str):
        raise shape.fail(path, "must be a string")
    return CaseKind(shape.choice(value, path, tuple(CaseKind), Code.UNSUPPORTED_FEATURE))


def event_pointer(value: JsonValue, path: str, kind: int) -> EventRef:
    """A closed `{id, pubkey, kind}` naming an exact event of `kind` (the profile's pointers).

    Unlike a shared EventRef it admits no `coordinate`, and a pointer to another kind is an
    `identity_mismatch`: it names an event, just not the one the field is about.
    """
    found = shape.closed(value, path, ("id", "pubkey", "kind"), unknown=Code.UNSUPPORTED_FEATURE)
    found_kind = shape.integer(found["kind"], shape.at(path, "kind"), low=0, high=65_535)
    event_id = shape.hex64(found["id"], shape.at(path, "id"))
    pubkey = shape.hex64(found["pubkey"], shape.at(path, "pubkey"))
    if found_kind != kind:
        raise shape.fail(shape.at(path, "kind"), f"must be {kind}", Code.IDENTITY_MISMATCH)
    return EventRef(id=event_id, pubkey=pubkey, kind=found_kind)


def identity_text(value: JsonValue, path: str) -> str:
    """A reliance entry or distribution id: 1–256 bytes (over-long is `malformed`, as the reference has it)."""
    if not isinstance(value, str):
        raise shape.fail(path, "must be a string or null")
    size = len(value.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= MAX_IDENTITY_BYTES:
        raise shape.fail(path, f"must be 1–{MAX_IDENTITY_BYTES} bytes")
    return value


@dataclass(frozen=True, slots=True)
class ProfileCase:
    id: str
    kind: CaseKind

    def to_json(self) -> dict[str, JsonValue]:
        return {"id": self.id, "kind": self.kind.value}


@dataclass(frozen=True, slots=True)
class Headline:
    """Cases passed per arm out of the case count; `baseline_passed` is None without a baseline."""

    subject_passed: int
    baseline_passed: int | None
    total: int

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Headline:
        found = shape.closed(
            value, path, ("subject_passed", "baseline_passed", "total"), unknown=Code.UNSUPPORTED_FEATURE
        )
        baseline = found["baseline_passed"]
        return cls(
            subject_passed=shape.integer(found["subject_passed"], shape.at(path, "subject_passed"), low=0),
            baseline_passed=None
            if baseline is None
            else shape.integer(baseline, shape.at(path, "baseline_passed"), low=0),
            total=shape.integer(found["total"], shape.at(path, "total"), low=0),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"subject_passed": self.subject_passed, "baseline_passed": self.baseline_passed, "total": self.total}


@dataclass(frozen=True, slots=True)
class Reliance:
    """The reliance set: identities the run leaned on beyond the artifact measured; None is unknown.

    The reference reads a missing entry as null; `omitted` remembers which entries the document left
    out, so re-serialising does not add them (and change the report's digest).
    """

    runner: str | None = None
    host: str | None = None
    door: str | None = None
    model: str | None = None
    agent: str | None = None
    selector: str | None = None
    graders: str | None = None
    omitted: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Reliance:
        found = shape.closed(value, path, (), RELIANCE_KEYS, unknown=Code.UNSUPPORTED_FEATURE)
        entries: dict[str, str | None] = {}
        for key in RELIANCE_KEYS:
            item = found.get(key)
            entries[key] = None if item is None else identity_text(item, shape.at(path, key))
        return cls(**entries, omitted=frozenset(key for key in RELIANCE_KEYS if key not in found))

    def entry(self, key: str) -> str | None:
        return {
            "runner": self.runner,
            "host": self.host,
            "door": self.door,
            "model": self.model,
            "agent": self.agent,
            "selector": self.selector,
            "graders": self.graders,
        }[key]

    def shared(self, other: Reliance) -> tuple[str, ...]:
        """Entries both runs named, and named alike: what a rerun shared with the original."""
        return tuple(key for key in RELIANCE_KEYS if (a := self.entry(key)) is not None and a == other.entry(key))

    def varied(self, other: Reliance) -> tuple[str, ...]:
        """Entries both runs named, and named differently: what a rerun varied."""
        return tuple(
            key
            for key in RELIANCE_KEYS
            if (a := self.entry(key)) is not None and (b := other.entry(key)) is not None and a != b
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {key: self.entry(key) for key in RELIANCE_KEYS if key not in self.omitted}


@dataclass(frozen=True, slots=True)
class ExtEval:
    """A checked `meta.ext_eval` record."""

    gate: str
    cases: tuple[ProfileCase, ...]
    headline: Headline
    requester: EventRef | None
    reliance: Reliance | None = None
    identity: Identity | None = None
    distribution: str | None = None
    defaults: EventRef | None = None
    #: Optional keys the document carried as an explicit `null` (written back as `null`).
    nulls: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: JsonValue, path: str = "meta.ext_eval", *, has_baseline: bool | None = None) -> ExtEval:
        """Check the record; `has_baseline` (the report's baseline arm) when known, None for a bare record."""
        found = shape.closed(value, path, _REQUIRED, _OPTIONAL, unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), PROFILE_SCHEMA)
        gate = shape.digest(found["gate"], shape.at(path, "gate"))
        cases = _cases(found["cases"], shape.at(path, "cases"))
        headline_path = shape.at(path, "headline")
        headline = Headline.parse(found["headline"], headline_path)
        if headline.total != len(cases):
            raise shape.fail(shape.at(headline_path, "total"), "must be the number of cases", Code.IDENTITY_MISMATCH)
        for key, passed in (("subject_passed", headline.subject_passed), ("baseline_passed", headline.baseline_passed)):
            if passed is not None and passed > headline.total:
                raise shape.fail(
                    shape.at(headline_path, key), "passes more cases than there are", Code.IDENTITY_MISMATCH
                )
        if has_baseline is not None and (headline.baseline_passed is not None) != has_baseline:
            raise shape.fail(
                shape.at(headline_path, "baseline_passed"),
                "must be null exactly when there is no baseline",
                Code.IDENTITY_MISMATCH,
            )
        requester = found["requester"]
        if requester is not None:
            requester = event_pointer(requester, shape.at(path, "requester"), REQUEST_KIND)
        nulls = frozenset(key for key in _OPTIONAL if key in found and found[key] is None)
        reliance = found.get("reliance")
        if reliance is not None:
            reliance = Reliance.parse(reliance, shape.at(path, "reliance"))
        identity = found.get("identity")
        if identity is not None:
            identity_path = shape.at(path, "identity")
            if not isinstance(identity, str):
                raise shape.fail(identity_path, "must be a string or null")
            identity = Identity(shape.choice(identity, identity_path, tuple(Identity), Code.UNSUPPORTED_FEATURE))
        distribution = found.get("distribution")
        if distribution is not None:
            distribution = identity_text(distribution, shape.at(path, "distribution"))
        defaults = found.get("defaults")
        if defaults is not None:
            defaults = event_pointer(defaults, shape.at(path, "defaults"), RELEASE_KIND)
        return cls(
            gate=gate,
            cases=cases,
            headline=headline,
            requester=requester,
            reliance=reliance,
            identity=identity,
            distribution=distribution,
            defaults=defaults,
            nulls=nulls,
        )

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": PROFILE_SCHEMA,
            "gate": self.gate,
            "cases": [case.to_json() for case in self.cases],
            "headline": self.headline.to_json(),
            "requester": None if self.requester is None else self.requester.to_json(),
        }
        optional: dict[str, JsonValue] = {
            "reliance": None if self.reliance is None else self.reliance.to_json(),
            "identity": None if self.identity is None else self.identity.value,
            "distribution": self.distribution,
            "defaults": None if self.defaults is None else self.defaults.to_json(),
        }
        for key, item in optional.items():
            if item is not None or key in self.nulls:
                out[key] = item
        return out


def _cases(value: JsonValue, path: str) -> tuple[ProfileCase, ...]:
    items = shape.indexed(value, path)
    if not 1 <= len(items) <= MAX_CASES:
        raise shape.fail(path, f"must hold 1–{MAX_CASES} cases")
    seen: set[str] = set()
    cases: list[ProfileCase] = []
    for item_path, item in items:
        found = shape.closed(item, item_path, ("id", "kind"), unknown=Code.UNSUPPORTED_FEATURE)
        id_path = shape.at(item_path, "id")
        identifier = case_id(found["id"], id_path)
        if identifier in seen:
            raise shape.fail(id_path, f"repeats case {identifier!r}")
        seen.add(identifier)
        cases.append(ProfileCase(id=identifier, kind=case_kind(found["kind"], shape.at(item_path, "kind"))))
    return tuple(cases)
