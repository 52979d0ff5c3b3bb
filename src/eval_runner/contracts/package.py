"""NIP-EXT package manifests (`openagents.package.v1`) and 3184 release bodies (wire.md §14.2, §14.4).

A published suite travels as a NIP-EXT release: a signed 3184 pins a manifest by digest, and the manifest
lists every file by digest and size. A checker materialises a suite only from what these pin, so both are
parsed the way `crates/nostr` `ext` parses them, with its codes, and written byte for byte the way the
runner writes them: the manifest as the engine's pretty JSON, the release body as compact sorted JSON
(its JCS form).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.publication import Unsigned
from eval_runner.contracts.refs import SLUG, ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, canonical, pretty, read
from eval_runner.nostr.errors import EventError
from eval_runner.nostr.event import Event, tag_values

PACKAGE_SCHEMA = "openagents.package.v1"
RELEASE_KIND = 3184
RELEASE_MARKER = "oa:ext:release:v1"
COMPONENT_KINDS = (
    "program",
    "plugin",
    "capability",
    "decision-function",
    "skill",
    "source",
    "checker",
    "operation",
    "ai-signature",
    "ai-implementation",
    "guidance",
    "schema",
    "eval-suite",
)
#: Inert kinds that need no operation descriptor.
DESCRIPTORLESS = ("guidance", "schema", "eval-suite")
PACKAGE_ID = re.compile(r"^([0-9a-f]{64}):([a-z0-9][a-z0-9_-]{0,63})$")
_MANIFEST_KEYS = ("v", "requires", "package", "version", "license", "provenance", "components", "files", "dependencies")


def package_id(value: JsonValue, path: str) -> str:
    """`<64-hex root pubkey>:<package slug>`."""
    return shape.string(value, path, pattern=PACKAGE_ID, what="a package id '<64-hex>:<slug>'")


def version_label(value: JsonValue, path: str) -> str:
    """A human-readable label, never the pin: non-empty, no whitespace."""
    if not isinstance(value, str) or not value or any(char.isspace() for char in value):
        raise shape.fail(path, "must be a non-empty label without whitespace")
    return value


def normalized_path(value: JsonValue, path: str) -> str:
    """A listed file's normalised relative POSIX path (empty and `.` parts dropped, as the reference does)."""
    if not isinstance(value, str) or value.startswith("/") or "\\" in value or "\x00" in value:
        raise shape.fail(path, "must be a relative POSIX path")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise shape.fail(path, "must name a file inside the package")
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where the package came from. `receipts`/`unknowns` are kept as written (only their shape is checked)."""

    source: str
    receipts: tuple[JsonValue, ...] = ()
    unknowns: tuple[JsonValue, ...] = ()

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Provenance:
        found = shape.closed(value, path, ("source", "receipts", "unknowns"), unknown=Code.UNSUPPORTED_FEATURE)
        source = found["source"]
        if not isinstance(source, str):
            raise shape.fail(shape.at(path, "source"), "must be a string")
        return cls(
            source=shape.choice(source, shape.at(path, "source"), ("local", "prebuilt"), Code.UNSUPPORTED_FEATURE),
            receipts=tuple(shape.array(found["receipts"], shape.at(path, "receipts"))),
            unknowns=tuple(shape.array(found["unknowns"], shape.at(path, "unknowns"))),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"source": self.source, "receipts": list(self.receipts), "unknowns": list(self.unknowns)}


@dataclass(frozen=True, slots=True)
class Component:
    slug: str
    kind: str
    definition: ArtifactRef
    descriptor: ArtifactRef | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Component:
        keys = ("slug", "kind", "definition")
        found = shape.closed(value, path, keys, ("descriptor",), unknown=Code.UNSUPPORTED_FEATURE)
        slug = shape.string(found["slug"], shape.at(path, "slug"), pattern=SLUG, what="a slug")
        kind = found["kind"]
        if not isinstance(kind, str):
            raise shape.fail(shape.at(path, "kind"), "must be a string")
        shape.choice(kind, shape.at(path, "kind"), COMPONENT_KINDS, Code.UNSUPPORTED_FEATURE)
        definition = ArtifactRef.parse(found["definition"], shape.at(path, "definition"))
        if kind == "schema" and definition.media_type != "application/schema+json":
            raise shape.fail(shape.at(path, "definition.media_type"), "a schema is JSON Schema", Code.INCOMPATIBLE)
        descriptor = None
        if "descriptor" in found:
            descriptor = ArtifactRef.parse(found["descriptor"], shape.at(path, "descriptor"))
        elif kind not in DESCRIPTORLESS:
            raise shape.fail(shape.at(path, "descriptor"), f"a {kind} component needs an operation descriptor")
        return cls(slug=slug, kind=kind, definition=definition, descriptor=descriptor)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"slug": self.slug, "kind": self.kind, "definition": self.definition.to_json()}
        if self.descriptor is not None:
            out["descriptor"] = self.descriptor.to_json()
        return out


@dataclass(frozen=True, slots=True)
class PackageFile:
    path: str
    digest: str
    size: int
    media_type: str

    @property
    def normalized(self) -> str:
        return normalized_path(self.path, "path")

    def to_json(self) -> dict[str, JsonValue]:
        return {"path": self.path, "digest": self.digest, "size": self.size, "media_type": self.media_type}


def _files(value: JsonValue, path: str) -> tuple[PackageFile, ...]:
    files: list[PackageFile] = []
    seen: set[str] = set()
    folded: set[str] = set()
    for item_path, item in shape.indexed(value, path):
        found = shape.closed(
            item, item_path, ("path", "digest", "size", "media_type"), unknown=Code.UNSUPPORTED_FEATURE
        )
        name = normalized_path(found["path"], shape.at(item_path, "path"))
        if name in seen or name.lower() in folded:
            raise shape.fail(shape.at(item_path, "path"), f"{name!r} is listed twice", Code.CONFLICT)
        seen.add(name)
        folded.add(name.lower())
        media_type = found["media_type"]
        if not isinstance(media_type, str):
            raise shape.fail(shape.at(item_path, "media_type"), "must be a string")
        if media_type == "application/x-symlink":
            raise shape.fail(shape.at(item_path, "media_type"), "links are not packaged", Code.UNSUPPORTED_FEATURE)
        files.append(
            PackageFile(
                path=found["path"],
                digest=shape.digest(found["digest"], shape.at(item_path, "digest")),
                size=shape.integer(found["size"], shape.at(item_path, "size"), low=0),
                media_type=media_type,
            )
        )
    return tuple(files)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A checked package manifest. `dependencies` are the release event ids the reference reads."""

    package: str
    version: str
    license: str
    provenance: Provenance
    components: tuple[Component, ...]
    files: tuple[PackageFile, ...]
    dependencies: tuple[str, ...] = ()
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Manifest:
        found = shape.closed(value, path, _MANIFEST_KEYS, ("meta",), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), PACKAGE_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        license_text = found["license"]
        if not isinstance(license_text, str):
            raise shape.fail(shape.at(path, "license"), "must be a string")
        components: list[Component] = []
        for item_path, item in shape.indexed(found["components"], shape.at(path, "components")):
            component = Component.parse(item, item_path)
            if any(other.slug == component.slug for other in components):
                raise shape.fail(shape.at(item_path, "slug"), f"two components are {component.slug!r}", Code.CONFLICT)
            components.append(component)
        dependencies = tuple(
            shape.string(item, at) for at, item in shape.indexed(found["dependencies"], shape.at(path, "dependencies"))
        )
        meta = None
        if "meta" in found:
            meta = shape.obj(found["meta"], shape.at(path, "meta"))
        return cls(
            package=package_id(found["package"], shape.at(path, "package")),
            version=version_label(found["version"], shape.at(path, "version")),
            license=license_text,
            provenance=Provenance.parse(found["provenance"], shape.at(path, "provenance")),
            components=tuple(components),
            files=_files(found["files"], shape.at(path, "files")),
            dependencies=dependencies,
            meta=meta,
        )

    @classmethod
    def parse_bytes(cls, data: bytes) -> Manifest:
        return cls.parse(read(data))

    @property
    def root(self) -> str:
        return self.package.split(":", 1)[0]

    def listed(self, artifact: ArtifactRef) -> bool:
        """Is a file with this digest and size listed (the suite-package rule compares both)?"""
        return any(file.digest == artifact.digest and file.size == artifact.size for file in self.files)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": PACKAGE_SCHEMA,
            "requires": [],
            "package": self.package,
            "version": self.version,
            "license": self.license,
            "provenance": self.provenance.to_json(),
            "components": [component.to_json() for component in self.components],
            "files": [file.to_json() for file in self.files],
            "dependencies": list(self.dependencies),
        }
        if self.meta is not None:
            out["meta"] = self.meta
        return out

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """The manifest's bytes as the runner uploads them (pretty JSON), checked, and the release's ref."""
        data = pretty(Manifest.parse(self.to_json()).to_json())
        return data, ArtifactRef.of_bytes(data, "application/json", PACKAGE_SCHEMA)


@dataclass(frozen=True, slots=True)
class Release:
    """A checked 3184 release: which package, which label, and the manifest it pins."""

    id: str
    pubkey: str
    created_at: int
    package: str
    version: str
    manifest: ArtifactRef
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    def pointer(self) -> dict[str, JsonValue]:
        """`{id, pubkey, kind: 3184}`, as reports and run answers name a release."""
        return {"id": self.id, "pubkey": self.pubkey, "kind": RELEASE_KIND}


def release_body(package: str, version: str, manifest: ArtifactRef) -> str:
    """The 3184 content: compact, sorted JSON (its JCS form), checked as a reader would check it."""
    body = {
        "v": 1,
        "requires": [],
        "type": "release",
        "package": package_id(package, "package"),
        "version": version_label(version, "version"),
        "manifest": manifest.to_json(),
    }
    return canonical(body).decode("utf-8")


def release(package: str, version: str, manifest: ArtifactRef) -> Unsigned:
    """The parts of a 3184 for a package's manifest; the signer must be the package root."""
    return Unsigned(kind=RELEASE_KIND, tags=(("t", RELEASE_MARKER),), content=release_body(package, version, manifest))


def read_release(event: Event) -> Release:
    """A signed 3184: signature, the single `oa:ext:` marker agreeing with the body's type, the closed
    body, and the signer as the package root."""
    try:
        event.verify()
    except EventError as error:
        raise ContractError(Code.IDENTITY_MISMATCH, "sig", f"the event does not verify: {error.message}") from None
    body = shape.obj(read(event.content), "")
    record_type = body.get("type")
    if not isinstance(record_type, str):
        raise shape.fail("type", "must be a string")
    markers = [value for value in tag_values(event, "t") if value.startswith("oa:ext:")]
    if len(markers) != 1:
        raise shape.fail("tags", "needs exactly one oa:ext: marker")
    if markers[0] != f"oa:ext:{record_type}:v1":
        raise ContractError(Code.IDENTITY_MISMATCH, "tags", "the marker disagrees with the body's type")
    if record_type != "release":
        raise shape.fail("type", "this reader takes releases only", Code.UNSUPPORTED_FEATURE)
    if event.kind != RELEASE_KIND:
        raise ContractError(Code.IDENTITY_MISMATCH, "kind", f"a release is a {RELEASE_KIND}")
    if body.get("v") != 1 or isinstance(body.get("v"), bool):
        raise shape.fail("v", "must be 1", Code.UNSUPPORTED_VERSION)
    found = shape.closed(
        body,
        "",
        ("v", "requires", "type", "package", "version", "manifest"),
        ("meta",),
        unknown=Code.UNSUPPORTED_FEATURE,
    )
    shape.empty_requires(found["requires"], "requires")
    package = package_id(found["package"], "package")
    if event.pubkey != package.split(":", 1)[0]:
        raise ContractError(Code.IDENTITY_MISMATCH, "pubkey", "a release is signed by its package root")
    meta = None
    if "meta" in found:
        meta = shape.obj(found["meta"], "meta")
    return Release(
        id=event.id,
        pubkey=event.pubkey,
        created_at=event.created_at,
        package=package,
        version=version_label(found["version"], "version"),
        manifest=ArtifactRef.parse(found["manifest"], "manifest"),
        meta=meta,
    )
