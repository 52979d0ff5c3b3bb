"""A test set as a suite release (runner.md §16.1): the package `<author>:<package>` holding one
`eval-suite` component, listing `suite.json`, `cases.json` and every case file, released by its author.

`suite_release` is pure: it builds the documents a run of the suite would write (`engine.testset.documents`,
so the digest a published suite is rerun under is the one released), the manifest (`contracts.suite`),
checks the package as a reader would, and makes the unsigned `3184`. `release_suite` uploads and publishes it
(`publish.upload_and_release`), reusing an identical release already on the relay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import release as release_event
from eval_runner.contracts.publication import Unsigned
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.suite import Suite as SuiteDocument
from eval_runner.contracts.suite import check_suite_package, media_type_for, suite_manifest
from eval_runner.engine.testset.cases import Suite
from eval_runner.engine.testset.documents import case_release_files, suite_documents
from eval_runner.engine.testset.frontmatter import TestSetError
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

#: The component a runner releases a test set under (`<author>:<package>/suite`).
SUITE_COMPONENT: Final = "suite"


@dataclass(frozen=True, slots=True)
class SuiteRelease:
    """A suite ready to release: what the manifest lists, the manifest's bytes, and the unsigned `3184`."""

    author: str
    package: str
    version: str
    suite: ArtifactRef
    files: tuple[ReleaseFile, ...]
    manifest: bytes
    manifest_ref: ArtifactRef
    unsigned: Unsigned

    @property
    def content(self) -> str:
        """The `3184`'s content, which is what makes two releases the same release."""
        return self.unsigned.content

    def uploads(self) -> tuple[ReleaseFile, ...]:
        """Every blob the release needs: the manifest, then each listed file."""
        return (ReleaseFile("manifest.json", self.manifest, JSON_MEDIA), *self.files)


def suite_release(
    suite: Suite, *, author: str, package: str, gate_file: bytes, component: str = SUITE_COMPONENT
) -> SuiteRelease:
    """The release of `suite` as `<author>:<package>/<component>` (`package` is the package slug), with
    `acceptance` naming `gate_file`'s bytes. `ReleaseError("testset", …)` when it does not check."""
    try:
        documents = suite_documents(suite, author=author, package=package, component=component, gate_file=gate_file)
    except TestSetError as error:
        raise ReleaseError("testset", str(error)) from None
    listed = [
        ("suite.json", documents.suite_bytes),
        ("cases.json", documents.files["cases.json"]),
        *case_release_files(suite),
    ]
    files = tuple(ReleaseFile(path, data, media_type_for(path)) for path, data in listed)
    try:
        document = SuiteDocument.parse_bytes(documents.suite_bytes)
        manifest = suite_manifest(
            document, documents.suite, [(file.path, ArtifactRef.of_bytes(file.data, file.media_type)) for file in files]
        )
        check_suite_package(manifest, documents.suite_bytes, documents.files["cases.json"])
        manifest_bytes, manifest_ref = manifest.ref()
        unsigned = release_event(manifest.package, manifest.version, manifest_ref)
    except ContractError as error:
        raise ReleaseError("testset", f"the suite release does not check: {error.detail}") from None
    return SuiteRelease(
        author=author,
        package=manifest.package,
        version=manifest.version,
        suite=documents.suite,
        files=files,
        manifest=manifest_bytes,
        manifest_ref=manifest_ref,
        unsigned=unsigned,
    )


async def release_suite(
    release: SuiteRelease, *, secret: SecretKey, blobs: BlobStorage, relay: ReleaseRelay
) -> Released:
    """Upload the suite's files and manifest, then publish its `3184` signed by `secret` (the suite's
    author), or reuse the identical one the relay holds."""
    if secret.public_key().to_hex() != release.author:
        raise ReleaseError("signer", f"{release.package} is released by its author {release.author}, not this key")
    return await upload_and_release(release.unsigned, release.uploads(), secret=secret, blobs=blobs, relay=relay)
