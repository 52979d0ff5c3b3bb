"""A released catalog tool's files from the blob store (runner.md §16.2), for rerunning a result on this
computer: the `3184` from the relay, its manifest by digest, and the files a tool release lists
(`package.json`, `programs/<slug>.json`, `skills/<name>.md`), each checked for its listed digest and size.
Any other path, or a name that could leave its folder, is refused before anything is fetched.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import Manifest, PackageFile
from eval_runner.contracts.refs import EventRef
from eval_runner.reader.verify import Reader, ReaderError
from eval_runner.service.blobs.errors import BlobError

#: The paths a tool release lists (`engine.testset.catalog`'s layout), with a plain file name.
TOOL_PATH: Final = re.compile(
    r"package\.json|programs/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\.json|skills/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\.md"
)
#: A tool release is a few small files.
MAX_TOOL_BYTES: Final = 4 * 1024 * 1024


async def _fetched(reader: Reader, digest: str, size: int, what: str) -> bytes:
    try:
        data = await reader.blobs.fetch(digest)
    except BlobError as error:
        raise ReaderError("tool", f"{what}: {error.message}") from None
    if len(data) != size or "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ReaderError("tool", f"{what}: the bytes are not the ones listed")
    return data


def _listed(manifest: Manifest) -> list[PackageFile]:
    files = list(manifest.files)
    for file in files:
        if not TOOL_PATH.fullmatch(file.normalized):
            raise ReaderError("tool", f"a tool release lists {file.normalized!r}, which is no tool file")
    if sum(file.size for file in files) > MAX_TOOL_BYTES:
        raise ReaderError("tool", f"the tool release lists more than {MAX_TOOL_BYTES} bytes")
    if "package.json" not in {file.normalized for file in files}:
        raise ReaderError("tool", "the tool release lists no package.json")
    return files


async def tool_files(reader: Reader, pointer: EventRef) -> dict[str, bytes]:
    """The files of the tool release `pointer` names, by path, every byte checked."""
    found = await reader.release(pointer)
    if isinstance(found, str):
        raise ReaderError("tool", found)
    _, release = found
    if release.manifest.size > MAX_TOOL_BYTES:
        raise ReaderError("tool", "the tool release's manifest is too large")
    data = await _fetched(reader, release.manifest.digest, release.manifest.size, "the tool's manifest")
    try:
        manifest = Manifest.parse_bytes(data)
    except ContractError as error:
        raise ReaderError("tool", f"the tool's manifest: {error.detail}") from None
    return {
        file.normalized: await _fetched(reader, file.digest, file.size, file.normalized) for file in _listed(manifest)
    }
