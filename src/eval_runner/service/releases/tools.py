"""Catalog tools as NIP-EXT releases (runner.md §16.2, wire.md §14.5), so a result can name its subject by
release (`subject.definition.event`) and credit can find the tool.

Only a tool whose package record names this runner as publisher is the runner's to release; any other is
said once in the log and never released. The package is `<runner>:<slug>`, labelled `<version>-<first 12
hex of the package record's digest>` so different bytes never share a label, listing `package.json`,
`programs/<slug>.json` and `skills/<name>.md`: each program a `program` component (its definition the
program's bytes, its descriptor the package record under `openagents.coder-package.v1`), each skill a
`guidance` component. That is the reference's `ext_eval::publish::extension_release` (decisions.md).

`ToolReleases` caches a release per definition id after its first success, so `serve` releases each tool
once at start and admission asks again (lazily) only for a tool whose start-up release failed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import Component, Manifest, PackageFile, Provenance
from eval_runner.contracts.package import release as release_event
from eval_runner.contracts.publication import Unsigned
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.engine.testset.catalog import PACKAGE_FILE, PACKAGE_SCHEMA, PROGRAMS_DIR, SKILLS_DIR, Tool
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.releases.publish import (
    JSON_MEDIA,
    Released,
    ReleaseError,
    ReleaseFile,
    ReleaseRelay,
    upload_and_release,
)

MARKDOWN_MEDIA: Final = "text/markdown"
LICENSE: Final = "NOASSERTION"

logger = logging.getLogger(__name__)


def not_ours(tool: Tool) -> str:
    """Why a tool is not this runner's to release (the reference's words)."""
    return f"its package names the publisher {tool.package.publisher}, not this runner"


@dataclass(frozen=True, slots=True)
class ExtensionRelease:
    """A catalog tool ready to release: its listed files, the manifest's bytes and the unsigned `3184`."""

    package: str
    version: str
    files: tuple[ReleaseFile, ...]
    manifest: bytes
    manifest_ref: ArtifactRef
    unsigned: Unsigned

    @property
    def content(self) -> str:
        return self.unsigned.content

    def uploads(self) -> tuple[ReleaseFile, ...]:
        """Every blob the release needs: the manifest, then each listed file."""
        return (ReleaseFile("manifest.json", self.manifest, JSON_MEDIA), *self.files)


def extension_release(tool: Tool, *, publisher: str) -> ExtensionRelease:
    """The release of `tool` as `<publisher>:<slug>`; `ReleaseError("tool", …)` when it does not check."""
    subject = tool.subject
    record = ReleaseFile(PACKAGE_FILE, tool.record, JSON_MEDIA)
    descriptor = ArtifactRef.of_bytes(tool.record, JSON_MEDIA, PACKAGE_SCHEMA)
    files = [record]
    components = []
    for program in subject.programs:
        files.append(ReleaseFile(f"{PROGRAMS_DIR}/{program.slug}.json", program.data, JSON_MEDIA))
        definition = ArtifactRef.of_bytes(program.data, JSON_MEDIA)
        components.append(Component(slug=program.slug, kind="program", definition=definition, descriptor=descriptor))
    for skill in subject.skills:
        files.append(ReleaseFile(f"{SKILLS_DIR}/{skill.name}.md", skill.data, MARKDOWN_MEDIA))
        definition = ArtifactRef.of_bytes(skill.data, MARKDOWN_MEDIA)
        components.append(Component(slug=skill.name, kind="guidance", definition=definition))
    version = f"{tool.package.version}-{hashlib.sha256(tool.record).hexdigest()[:12]}"
    manifest = Manifest(
        package=f"{publisher}:{subject.slug}",
        version=version,
        license=LICENSE,
        provenance=Provenance(source="local"),
        components=tuple(components),
        files=tuple(
            PackageFile(file.path, f"sha256:{file.hex_digest}", len(file.data), file.media_type) for file in files
        ),
    )
    try:
        manifest_bytes, manifest_ref = manifest.ref()
        unsigned = release_event(manifest.package, manifest.version, manifest_ref)
    except ContractError as error:
        raise ReleaseError("tool", f"{tool.name} does not make a release: {error.detail}") from None
    return ExtensionRelease(
        package=manifest.package,
        version=version,
        files=tuple(files),
        manifest=manifest_bytes,
        manifest_ref=manifest_ref,
        unsigned=unsigned,
    )


class ToolReleases:
    """The runner's catalog tool releases: made once each, then remembered by definition id."""

    def __init__(self, *, secret: SecretKey, blobs: BlobStorage, relay: ReleaseRelay) -> None:
        self._secret = secret
        self.runner = secret.public_key().to_hex()
        self._blobs = blobs
        self._relay = relay
        self._known: dict[str, Released] = {}
        self._said: set[str] = set()
        self._lock = asyncio.Lock()

    def ours(self, tool: Tool) -> bool:
        """Does the tool's package name this runner as publisher? Says once in the log when it does not."""
        if tool.package.publisher == self.runner:
            return True
        if tool.definition.id not in self._said:
            self._said.add(tool.definition.id)
            logger.info("%s: %s", tool.name, not_ours(tool))
        return False

    async def released(self, tool: Tool) -> Released:
        """`tool`'s release: remembered, found on the relay, or published now. `ReleaseError` otherwise
        (`publisher` for a tool that is not this runner's)."""
        async with self._lock:
            known = self._known.get(tool.definition.id)
            if known is not None:
                return known
            if not self.ours(tool):
                raise ReleaseError("publisher", not_ours(tool))
            prepared = extension_release(tool, publisher=self.runner)
            found = await upload_and_release(
                prepared.unsigned, prepared.uploads(), secret=self._secret, blobs=self._blobs, relay=self._relay
            )
            self._known[tool.definition.id] = found
            return found

    def known(self) -> dict[str, EventRef]:
        """The releases made so far, by the tool's definition id (what the defaults reader matches)."""
        return {ident: found.event for ident, found in self._known.items()}

    async def release(self, tool: Tool) -> EventRef:
        """Admission's hook (`service.requests.admission.ToolRelease`): the release event of `tool`."""
        return (await self.released(tool)).event

    async def release_catalog(self, tools: Sequence[Tool]) -> list[tuple[Tool, Released]]:
        """Every tool this runner publishes, in catalog order; the first failure is raised (those released
        before it stay remembered)."""
        return [(tool, await self.released(tool)) for tool in tools if self.ours(tool)]
