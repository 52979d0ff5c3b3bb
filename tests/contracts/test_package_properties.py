"""Property tests for the NIP-EXT readers (`contracts.package`): a `3184` release and a package manifest either
read into a record that keeps the rules, or raise ContractError; never another exception.

Releases are signed events over mutated bodies, with marker tags, kinds and signers drawn, and some tampered
after signing. Manifests are the example suite's with hostile paths, sizes, digests and file lists put in,
and arbitrary bytes. An accepted manifest never lists a path that leaves the package, nor two paths that
name one file; an accepted release is signed by its package root.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.package import RELEASE_KIND, Manifest, read_release
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, canonical
from eval_runner.nostr import SecretKey, sign
from tests.support.published_suites import example_release, manifest_json

ROOT = SecretKey(hashlib.sha256(b"package-properties: root").digest())
OTHER = SecretKey(hashlib.sha256(b"package-properties: other").digest())
RELEASE = example_release(ROOT.public_key().to_hex())
MANIFEST = manifest_json(RELEASE)
BODY = json.loads(RELEASE.content)

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.text(max_size=12)
    | st.sampled_from(["release", "listing", 1, "sha256:" + "0" * 64, ROOT.public_key().to_hex(), "suite-x", ""])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
HOSTILE_PATHS = st.sampled_from(
    [
        "../escape",
        "evals/../../escape",
        "evals/greeting/../../../x",
        "/etc/passwd",
        "evals\\..\\x",
        "evals/greeting/prompt.md\x00",
        "evals/./greeting/prompt.md",
        "evals//greeting//prompt.md",
        "EVALS/greeting/prompt.md",
        "evals/Greeting/prompt.md",
        "suite.json",
        "SUITE.JSON",
        ".",
        "./",
        "",
        "evals",
        "evals/" + "a" * 600,
        "evals/ü/é",
        "evals/greeting/prompt.md/inner",
    ]
) | st.text(max_size=40)
SIZES = st.integers(min_value=-3, max_value=2**64) | st.sampled_from([0, 1, 16 * 1024 * 1024 + 1, MAX_SAFE_INTEGER])
DIGESTS = st.sampled_from(["sha256:" + "f" * 64, "sha256:" + "F" * 64, "sha256:", "0" * 64, "md5:00"]) | st.text(
    max_size=80
)


def containers(value: JsonValue) -> list[JsonValue]:
    found = [value]
    for child in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        found.extend(containers(child))
    return [item for item in found if isinstance(item, dict | list)]


@st.composite
def mutated(draw: st.DrawFn, document: JsonValue) -> JsonValue:
    """A copy of `document` with one key dropped, added or replaced somewhere in its tree."""
    value = copy.deepcopy(document)
    target = draw(st.sampled_from(containers(value)))
    replacement = draw(JSON)
    if isinstance(target, dict):
        keys = sorted(target)
        action = draw(st.sampled_from(["drop", "add", "replace"] if keys else ["add"]))
        if action == "add":
            target[draw(st.text(max_size=8))] = replacement
        elif action == "drop":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = replacement
    elif isinstance(target, list):
        if target:
            target[draw(st.integers(0, len(target) - 1))] = replacement
        else:
            target.append(replacement)
    return value


@st.composite
def hostile_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """The example manifest with paths, sizes, digests or the file list spoiled, one to three times."""
    manifest = copy.deepcopy(MANIFEST)
    files: list[dict[str, Any]] = manifest["files"]
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(files) - 1)) if files else 0
        action = draw(st.sampled_from(["path", "size", "digest", "drop", "duplicate", "media"]))
        if not files:
            files.append({"path": draw(HOSTILE_PATHS), "digest": draw(DIGESTS), "size": 1, "media_type": "a/b"})
        elif action == "path":
            files[index]["path"] = draw(HOSTILE_PATHS)
        elif action == "size":
            files[index]["size"] = draw(SIZES)
        elif action == "digest":
            files[index]["digest"] = draw(DIGESTS)
        elif action == "drop":
            files.pop(index)
        elif action == "duplicate":
            files.append(dict(files[index]) | {"path": draw(HOSTILE_PATHS | st.just(files[index]["path"]))})
        else:
            files[index]["media_type"] = draw(st.sampled_from(["application/x-symlink", "", "text/markdown"]))
    return manifest


def accepted(value: JsonValue) -> Manifest | None:
    try:
        return Manifest.parse(value)
    except ContractError:
        return None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_manifests())
def test_an_accepted_manifest_lists_only_paths_inside_the_package_each_once(value: dict[str, Any]) -> None:
    manifest = accepted(value)
    if manifest is None:
        return
    names = [file.normalized for file in manifest.files]
    for name in names:
        parts = name.split("/")
        assert not name.startswith("/")
        assert ".." not in parts
        assert "" not in parts
        assert "\\" not in name
        assert "\x00" not in name
    assert len({name.lower() for name in names}) == len(names)
    assert all(file.size >= 0 for file in manifest.files)
    assert canonical(Manifest.parse(manifest.to_json()).to_json()) == canonical(manifest.to_json())


@given(st.binary(max_size=300) | st.sampled_from([RELEASE.manifest, RELEASE.manifest[:-3], b"\xff" + RELEASE.manifest]))
def test_manifest_bytes_only_ever_raise_contract_error(data: bytes) -> None:
    try:
        manifest = Manifest.parse_bytes(data)
    except ContractError:
        return
    assert manifest.package == RELEASE.package


TAGS = st.sampled_from(
    [
        [["t", "oa:ext:release:v1"]],
        [],
        [["t", "oa:ext:listing:v1"]],
        [["t", "oa:ext:release:v1"], ["t", "oa:ext:release:v1"]],
        [["t", "oa:ext:release:v1"], ["t", "other"]],
        [["t", "oa:ext:release:v2"]],
        [["e", "0" * 64], ["t", "oa:ext:release:v1"]],
    ]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=mutated(BODY) | JSON | st.just(BODY),
    tags=TAGS,
    kind=st.sampled_from([RELEASE_KIND, RELEASE_KIND, 3185, 30184, 1]),
    signer=st.sampled_from([ROOT, ROOT, OTHER]),
    text=st.none() | st.text(max_size=60),
    tamper=st.sampled_from([None, None, "content", "pubkey", "sig", "id"]),
)
def test_a_release_event_is_read_or_refused_with_a_contract_error(
    body: JsonValue, tags: list[list[str]], kind: int, signer: SecretKey, text: str | None, tamper: str | None
) -> None:
    content = canonical(body).decode() if text is None else text
    event = sign(signer, kind, tags, content, 1_790_000_000)
    if tamper == "content":
        event = dataclasses.replace(event, content=content + " ")
    elif tamper == "pubkey":
        event = dataclasses.replace(event, pubkey=OTHER.public_key().to_hex())
    elif tamper == "sig":
        event = dataclasses.replace(event, sig="0" * 128)
    elif tamper == "id":
        event = dataclasses.replace(event, id="1" * 64)
    try:
        release = read_release(event)
    except ContractError:
        return
    assert tamper is None, "a tampered event never reads as a release"
    assert event.kind == RELEASE_KIND
    assert release.pubkey == event.pubkey == release.package.split(":", 1)[0]
    assert release.pointer() == {"id": event.id, "pubkey": event.pubkey, "kind": RELEASE_KIND}
