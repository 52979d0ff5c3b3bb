"""Walk a results directory the way a checker would: every ArtifactRef a report names (and the documents
those name in turn) must be bytes in the directory with that digest and size."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from eval_runner.contracts.strict_json import JsonValue, read


def files_by_digest(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
            found.setdefault(digest, []).append(path.relative_to(root).as_posix())
    return found


def artifact_refs(value: JsonValue) -> list[dict[str, Any]]:
    """Every ArtifactRef-shaped object (`digest`, `size`, `media_type`) anywhere in a JSON value."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if {"digest", "size", "media_type"} <= set(item):
                found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def verify_every_ref(directory: Path, report_bytes: bytes) -> tuple[int, dict[str, list[str]]]:
    """Check every reference reachable from the report against the directory; returns how many were
    checked and the directory's files by digest. Fails the test on the first reference with no bytes."""
    by_digest = files_by_digest(directory)
    seen: set[str] = set()
    pending: list[JsonValue] = [read(report_bytes)]
    checked = 0
    while pending:
        for ref in artifact_refs(pending.pop()):
            paths = by_digest.get(ref["digest"])
            assert paths, f"nothing in the results directory has {ref}"
            assert (directory / paths[0]).stat().st_size == ref["size"]
            checked += 1
            if ref["digest"] in seen:
                continue
            seen.add(ref["digest"])
            if ref["media_type"] == "application/json":
                # Walk into the documents a reference names: runs.json, suite.json, cases.json, locks…
                pending.append(read((directory / paths[0]).read_bytes()))
    return checked, by_digest
