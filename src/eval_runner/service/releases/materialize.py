"""A published test set back on disk: from a signed `3184` to `<staging>/evals/…`, every byte checked (wire.md
§14.6, runner.md §16.4).

The release pins the manifest by digest and the manifest pins every file by digest and size, so nothing
here trusts a blob store: each blob is fetched by its digest and checked for that digest and its listed size,
and the whole package is checked as a reader checks it before a byte is written. Files are written under the
staging directory only, one path component at a time, never following a link. Bounds come first: a
manifest's files and bytes are capped before anything they list is fetched, a few fetches run at once, and
the whole materialization has a deadline.

`SuiteCache` keeps checked packages by manifest digest under the state directory, so a second run of a
release fetches nothing. A cached package goes through the same checks (its bytes hashed again) before a
run's staging gets its own copy, so neither a damaged cache nor a run can change what the next run sees.
Every failure is a `MaterializeError` whose code says what a caller may do about it (decisions.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

from eval_runner.contracts.case_manifest import CaseManifest
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import PACKAGE_SCHEMA, RELEASE_KIND, Manifest, PackageFile, Release, read_release
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import MAX_BODY_BYTES
from eval_runner.contracts.suite import COMPONENT_KIND, Suite, SuitePackage, case_file_paths, check_suite_package
from eval_runner.errors import CodedError
from eval_runner.nostr.event import Event
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.blobs.errors import BlobError

logger = logging.getLogger(__name__)

MaterializeCode = Literal["content_unavailable", "identity_mismatch", "not_admitted", "too_large", "unavailable"]

EVALS: Final = "evals"
#: A manifest, `suite.json` and `cases.json` are JSON documents, read under the strict reader's bound.
MAX_DOCUMENT_BYTES: Final = MAX_BODY_BYTES
MAX_FILES: Final = 2_048
MAX_PACKAGE_BYTES: Final = 64 * 1024 * 1024
FETCHES_AT_ONCE: Final = 4
MATERIALIZE_SECONDS: Final = 300.0
#: A cache entry still being written this long after it was started was left by a crash.
_STALE_PARTIAL_SECONDS: Final = 3_600
_PARTIAL: Final = ".partial-"
_BLOB_CODES: Final[dict[str, MaterializeCode]] = {
    "content_unavailable": "content_unavailable",
    "identity_mismatch": "identity_mismatch",
    "too_large": "identity_mismatch",  # more bytes than the listed size: not the listed blob
}
_PATH_GAMES: Final = frozenset({errno.EEXIST, errno.ENOTDIR, errno.ELOOP, errno.EISDIR})

T = TypeVar("T")
Fetch = Callable[[str], Awaitable[bytes]]


class MaterializeError(CodedError):
    """A published test set that could not be put on disk. Codes: `content_unavailable` (a blob no store
    has), `identity_mismatch` (bytes that are not the listed blob: digest or size), `not_admitted` (a
    release or package that breaks the rules), `too_large` (past this runner's bounds), `unavailable` (the
    store could not be reached, or the staging directory not written: a retry may work)."""

    code: MaterializeCode

    def __init__(self, code: MaterializeCode, message: str) -> None:
        super().__init__(code, message)


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much a package may hold, how many blobs are fetched at once, and how long it all may take."""

    files: int = MAX_FILES
    total_bytes: int = MAX_PACKAGE_BYTES
    at_once: int = FETCHES_AT_ONCE
    seconds: float = MATERIALIZE_SECONDS


@dataclass(frozen=True, slots=True)
class MaterializedSuite:
    """A test set on disk: its eval dir, who wrote it (`<author>:<package>/<component>`, from the suite
    id), the release it came from, and the digest of its `suite.json`."""

    evals: Path
    author: str
    package: str
    component: str
    release: EventRef
    suite_digest: str

    @property
    def suite_id(self) -> str:
        return f"{self.author}:{self.package}/{self.component}"


@dataclass(frozen=True, slots=True)
class CheckedPackage:
    """A release whose every byte checked: the manifest's bytes, `suite.json`, `cases.json` and the case
    files under `evals/` (by their listed path, in listing order)."""

    release: Release
    manifest_bytes: bytes
    suite_bytes: bytes
    cases_bytes: bytes
    package: SuitePackage
    evals: dict[str, bytes]

    @property
    def suite(self) -> Suite:
        return self.package.suite

    @property
    def suite_digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.suite_bytes).hexdigest()


def checked_release(event: Event) -> Release:
    """The `3184`'s signature, its marker against its body, the body, and its signer as the package root."""
    try:
        return read_release(event)
    except ContractError as error:
        raise MaterializeError("not_admitted", f"the release: {error.detail}") from None


async def materialize(
    event: Event,
    blobs: BlobStorage,
    into: Path,
    *,
    cache: SuiteCache | None = None,
    bounds: Bounds = Bounds(),
) -> MaterializedSuite:
    """Check the release `event`, fetch and check its package, and write its case files to `<into>/evals`
    (which must not exist yet). With a `cache`, a package it holds is used instead of the store."""
    release = checked_release(event)
    try:
        async with asyncio.timeout(bounds.seconds):
            package, fetched = await _package(release, blobs, cache, bounds)
    except TimeoutError:
        raise MaterializeError(
            "unavailable", f"the test set's files did not all arrive within {bounds.seconds:g} s"
        ) from None
    if cache is not None and fetched:
        await asyncio.to_thread(cache.keep, package)
    evals = await asyncio.to_thread(write_evals, package.evals, into)
    suite = package.suite
    return MaterializedSuite(
        evals=evals,
        author=suite.author,
        package=suite.package,
        component=suite.component,
        release=EventRef(id=release.id, pubkey=release.pubkey, kind=RELEASE_KIND),
        suite_digest=package.suite_digest,
    )


async def _package(
    release: Release, blobs: BlobStorage, cache: SuiteCache | None, bounds: Bounds
) -> tuple[CheckedPackage, bool]:
    """The checked package, from the cache when it holds it whole, else from the store (True: fetched)."""
    if cache is not None:
        held = await asyncio.to_thread(cache.held, release.manifest.digest, bounds)
        if held is not None:
            try:
                return await checked_package(release, held.fetch, bounds), False
            except _CacheMissError:
                await asyncio.to_thread(cache.drop, release.manifest.digest)
    return await checked_package(release, _store_fetch(blobs), bounds), True


def _store_fetch(blobs: BlobStorage) -> Fetch:
    async def fetch(digest: str) -> bytes:
        try:
            return await blobs.fetch(digest)
        except BlobError as error:
            raise MaterializeError(_BLOB_CODES.get(error.code, "unavailable"), error.message) from None

    return fetch


# -- checking a package ----------------------------------------------------------------------------------


def _contract(what: str, check: Callable[[], T]) -> T:
    try:
        return check()
    except ContractError as error:
        raise MaterializeError("not_admitted", f"{what}: {error.detail}") from None


async def _fetched(fetch: Fetch, digest: str, size: int, what: str) -> bytes:
    """The blob named `digest`, which must be exactly `size` bytes (checked here whatever the store did)."""
    try:
        data = await fetch(digest)
    except _CacheMissError:
        raise
    except MaterializeError as error:
        raise MaterializeError(error.code, f"{what}: {error.message}") from None
    if len(data) != size:
        raise MaterializeError("identity_mismatch", f"{what} is {len(data)} bytes, not the {size} listed")
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise MaterializeError("identity_mismatch", f"{what}: the bytes do not digest to {digest}")
    return data


async def checked_package(release: Release, fetch: Fetch, bounds: Bounds) -> CheckedPackage:
    """Fetch and check everything `release` pins (wire.md §14.6 steps 2–4), bounds before any file."""
    ref = release.manifest
    if ref.schema != PACKAGE_SCHEMA:
        raise MaterializeError("not_admitted", f"the release's manifest is not an {PACKAGE_SCHEMA}")
    _document_size(ref.size, "the manifest")
    manifest_bytes = await _fetched(fetch, ref.digest, ref.size, "the manifest")
    manifest = _contract("the manifest", lambda: Manifest.parse_bytes(manifest_bytes))
    if (manifest.package, manifest.version) != (release.package, release.version):
        raise MaterializeError(
            "not_admitted", f"the manifest is {manifest.package} {manifest.version}, not the release's"
        )
    _bounded(manifest, bounds)
    components = [component for component in manifest.components if component.kind == COMPONENT_KIND]
    if len(components) != 1:
        raise MaterializeError(
            "not_admitted", f"a test set's package has one {COMPONENT_KIND} component, this one {len(components)}"
        )
    component = components[0]
    definition = component.definition
    if not manifest.listed(definition):
        raise MaterializeError("not_admitted", "the package does not list its suite.json")
    _document_size(definition.size, "suite.json")
    suite_bytes = await _fetched(fetch, definition.digest, definition.size, "suite.json")
    suite = _contract("suite.json", lambda: Suite.parse_bytes(suite_bytes))
    _document_size(suite.cases.size, "cases.json")
    cases_bytes = await _fetched(fetch, suite.cases.digest, suite.cases.size, "cases.json")
    checked = _contract("the package", lambda: check_suite_package(manifest, suite_bytes, cases_bytes))
    if suite.id != f"{manifest.package}/{component.slug}":
        raise MaterializeError(
            "not_admitted", f"the suite {suite.id} is not this package's component {manifest.package}/{component.slug}"
        )
    listed = _evals_files(manifest, checked.cases)
    found = await _fetch_all(fetch, listed, bounds.at_once)
    return CheckedPackage(
        release=release,
        manifest_bytes=manifest_bytes,
        suite_bytes=suite_bytes,
        cases_bytes=cases_bytes,
        package=checked,
        evals={path: found[file.digest] for path, file in listed.items()},
    )


def _document_size(size: int, what: str) -> None:
    if size > MAX_DOCUMENT_BYTES:
        raise MaterializeError("too_large", f"{what} is listed at {size} bytes; at most {MAX_DOCUMENT_BYTES}")


def _bounded(manifest: Manifest, bounds: Bounds) -> None:
    if len(manifest.files) > bounds.files:
        raise MaterializeError("too_large", f"the package lists {len(manifest.files)} files; at most {bounds.files}")
    total = sum(file.size for file in manifest.files)
    if total > bounds.total_bytes:
        raise MaterializeError("too_large", f"the package lists {total} bytes; at most {bounds.total_bytes}")


def _evals_files(manifest: Manifest, cases: CaseManifest) -> dict[str, PackageFile]:
    """The listed files under `evals/`, which must be exactly the case files the case manifest names, each
    at its place (`evals/<case>/…`) with its digest and size."""
    named = dict(case_file_paths(cases))
    listed: dict[str, PackageFile] = {}
    for file in manifest.files:
        path = file.normalized
        if not path.startswith(f"{EVALS}/"):
            continue
        artifact = named.get(path)
        if artifact is None:
            raise MaterializeError("not_admitted", f"the package lists {path}, which is no case's file")
        if (artifact.digest, artifact.size) != (file.digest, file.size):
            raise MaterializeError("not_admitted", f"the package lists {path} as other bytes than cases.json names")
        listed[path] = file
    missing = [path for path in named if path not in listed]
    if missing:
        raise MaterializeError("not_admitted", f"the package does not list {missing[0]} where cases.json names it")
    return listed


async def _fetch_all(fetch: Fetch, listed: Mapping[str, PackageFile], at_once: int) -> dict[str, bytes]:
    """Each distinct blob once, at most `at_once` at a time; the first failure stops the rest."""
    wanted: dict[str, tuple[int, str]] = {}
    for path, file in listed.items():
        wanted.setdefault(file.digest, (file.size, path))
    queue = list(wanted.items())
    queue.reverse()
    found: dict[str, bytes] = {}

    async def worker() -> None:
        while queue:
            digest, (size, path) = queue.pop()
            found[digest] = await _fetched(fetch, digest, size, path)

    workers = [asyncio.ensure_future(worker()) for _ in range(min(max(at_once, 1), len(queue)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return found


# -- writing inside a directory --------------------------------------------------------------------------


def write_evals(files: Mapping[str, bytes], into: Path) -> Path:
    """Write each `evals/<rest>` file under `<into>/evals` (made here; it must not exist yet). Every path
    component is created or opened relative to its parent without following links, so nothing is written
    outside `into` whatever the names hold."""
    try:
        root = os.open(into, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        raise MaterializeError("unavailable", f"the staging directory: {error.strerror}") from None
    try:
        try:
            os.mkdir(EVALS, 0o755, dir_fd=root)
        except OSError as error:
            raise MaterializeError("unavailable", f"the staging directory's {EVALS}: {error.strerror}") from None
        for path, data in files.items():
            _write_at(root, path, data)
    finally:
        os.close(root)
    return into / EVALS


def _parts(path: str) -> list[str]:
    parts = path.split("/")
    if not parts or parts[0] != EVALS or len(parts) < 2:
        raise MaterializeError("not_admitted", f"{path!r} is not a file under {EVALS}/")
    for part in parts:
        if part in ("", ".", "..") or "\x00" in part or "\\" in part:
            raise MaterializeError("not_admitted", f"{path!r} escapes its directory")
    return parts


def _write_at(root: int, path: str, data: bytes) -> None:
    parts = _parts(path)
    opened: list[int] = []
    where = root
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=where)
            where = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=where)
            opened.append(where)
        descriptor = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=where)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
    except OSError as error:
        if error.errno in _PATH_GAMES:
            raise MaterializeError("not_admitted", f"{path} runs into another listed path") from None
        raise MaterializeError("unavailable", f"writing {path}: {error.strerror}") from None
    finally:
        for descriptor in opened:
            os.close(descriptor)


# -- the cache -------------------------------------------------------------------------------------------


class _CacheMissError(MaterializeError):
    """A cached entry that lacks a blob the package names (damaged or incomplete): fetch it all afresh."""

    def __init__(self, digest: str) -> None:
        super().__init__("content_unavailable", f"the cache lacks {digest}")


@dataclass(frozen=True, slots=True)
class HeldPackage:
    """A cache entry's blobs by their actual digest (hashed on reading, so damage reads as a miss)."""

    blobs: dict[str, bytes]

    async def fetch(self, digest: str) -> bytes:
        found = self.blobs.get(digest)
        if found is None:
            raise _CacheMissError(digest)
        return found


class SuiteCache:
    """Checked packages by manifest digest: `<root>/<manifest hex>/{manifest.json,suite.json,cases.json,evals/…}`.

    An entry is written whole under a temporary name and renamed into place; a reader hashes every byte
    again and goes through every check, so the cache is never trusted by its presence alone. Nothing
    evicts entries: the operator may remove the directory at any time (the next run fetches again).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def entry(self, manifest_digest: str) -> Path:
        return self.root / manifest_digest.removeprefix("sha256:")

    def held(self, manifest_digest: str, bounds: Bounds) -> HeldPackage | None:
        """The entry's blobs, or None when there is no entry or it cannot be read within the bounds."""
        entry = self.entry(manifest_digest)
        if not entry.is_dir():
            return None
        blobs: dict[str, bytes] = {}
        total = 0
        try:
            for path in _tree(entry):
                descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(descriptor, "rb") as file:
                    data = file.read(bounds.total_bytes + 1 - total)
                total += len(data)
                if total > bounds.total_bytes:
                    return None
                blobs["sha256:" + hashlib.sha256(data).hexdigest()] = data
        except OSError as error:
            logger.warning("suites: the cached %s can't be read (%s); fetching it again", entry.name, error.strerror)
            return None
        return HeldPackage(blobs)

    def keep(self, package: CheckedPackage) -> None:
        """Keep a checked package (failures only logged: the run goes on without the cache)."""
        final = self.entry(package.release.manifest.digest)
        if final.exists():
            return
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._sweep()
            partial = self.root / f"{_PARTIAL}{secrets.token_hex(8)}"
            partial.mkdir(mode=0o700)
        except OSError as error:
            logger.warning("suites: can't keep %s: %s", final.name, error.strerror)
            return
        try:
            for name, data in (
                ("manifest.json", package.manifest_bytes),
                ("suite.json", package.suite_bytes),
                ("cases.json", package.cases_bytes),
            ):
                (partial / name).write_bytes(data)
            write_evals(package.evals, partial)
            os.rename(partial, final)
        except (OSError, MaterializeError) as error:
            if not final.exists():
                logger.warning("suites: can't keep %s: %s", final.name, getattr(error, "strerror", None) or error)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def drop(self, manifest_digest: str) -> None:
        logger.warning("suites: the cached %s is damaged; fetching it again", self.entry(manifest_digest).name)
        shutil.rmtree(self.entry(manifest_digest), ignore_errors=True)

    def _sweep(self) -> None:
        """Remove entries a crash left half written."""
        cutoff = time.time() - _STALE_PARTIAL_SECONDS
        for path in self.root.glob(f"{_PARTIAL}*"):
            with contextlib.suppress(OSError):
                if path.lstat().st_mtime < cutoff:
                    shutil.rmtree(path, ignore_errors=True)


def _tree(root: Path) -> Iterator[Path]:
    """Every regular file under `root`; links are not followed (and a link among the files fails to open)."""
    for directory, _, names in os.walk(root, followlinks=False):
        for name in names:
            yield Path(directory) / name
