"""The suite document, the package manifest that publishes it, and its 3184 release body."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import (
    PACKAGE_SCHEMA,
    RELEASE_MARKER,
    Component,
    Manifest,
    read_release,
    release,
    release_body,
)
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from eval_runner.contracts.suite import (
    SUITE_SCHEMA,
    Suite,
    check_suite_package,
    media_type_for,
)
from eval_runner.nostr.event import Event, sign
from eval_runner.nostr.keys import SecretKey
from tests.support.sample_reports import blob
from tests.support.suite_packages import AUTHOR, ROOT, built


def test_a_released_suite_package_checks() -> None:
    suite, suite_bytes, suite_ref, cases, cases_bytes, manifest = built()
    package = check_suite_package(manifest, suite_bytes, cases_bytes)
    assert (package.slug, package.suite, package.cases) == ("suite", suite, cases)
    assert manifest.package == f"{AUTHOR}:repo-map-brief-tests"
    assert manifest.version == "suite-" + suite_ref.digest[7:19]
    assert manifest.license == "NOASSERTION"
    assert [file.path for file in manifest.files] == [
        "suite.json",
        "cases.json",
        "evals/map-repo/prompt.md",
        "evals/map-repo/graders/criteria.md",
        "evals/map-repo/fixtures/src/main.rs",
        "evals/say-hello/prompt.md",
        "evals/say-hello/case.toml",
    ]
    assert [file.media_type for file in manifest.files][2:4] == ["text/markdown", "text/markdown"]
    data, ref = manifest.ref()
    assert ref.schema == PACKAGE_SCHEMA
    assert ref.matches(data)
    assert Manifest.parse_bytes(data) == manifest
    assert (suite.author, suite.package, suite.component, suite.gate) == (
        AUTHOR,
        "repo-map-brief-tests",
        "suite",
        "ext-eval-v2",
    )
    assert Suite.parse_bytes(suite_bytes) == suite
    assert suite_ref.schema == SUITE_SCHEMA


def test_the_package_check_refuses_each_broken_rule() -> None:
    _, suite_bytes, suite_ref, _, cases_bytes, manifest = built()
    second = Component(slug="other", kind="eval-suite", definition=suite_ref)
    cases = [
        (replace(manifest, components=(*manifest.components, second)), suite_bytes, cases_bytes, Code.MALFORMED),
        (replace(manifest, files=manifest.files[:-1]), suite_bytes, cases_bytes, Code.CONTENT_UNAVAILABLE),
        (
            replace(manifest, files=manifest.files[:1] + manifest.files[2:]),
            suite_bytes,
            cases_bytes,
            Code.CONTENT_UNAVAILABLE,
        ),
        (manifest, b"{}", cases_bytes, Code.IDENTITY_MISMATCH),
        (manifest, suite_bytes, cases_bytes + b" ", Code.IDENTITY_MISMATCH),
        (
            replace(manifest, components=(replace(manifest.components[0], definition=blob("x", "other.v1")),)),
            suite_bytes,
            cases_bytes,
            Code.IDENTITY_MISMATCH,
        ),
    ]
    for package, suite_data, cases_data, code in cases:
        with pytest.raises(ContractError) as caught:
            check_suite_package(package, suite_data, cases_data)
        assert caught.value.code is code


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda v: v.update(purpose="agent"), Code.UNSUPPORTED_FEATURE),
        (
            lambda v: v["acceptance"].update(id=v["acceptance"]["id"].replace("ext-eval-v2", "other-gate")),
            Code.IDENTITY_MISMATCH,
        ),
        (lambda v: v["cases"].update(schema="openagents.other.v1"), Code.IDENTITY_MISMATCH),
        (lambda v: v.update(id="suite"), Code.MALFORMED),
        (lambda v: v.update(extra=1), Code.UNSUPPORTED_FEATURE),
        (lambda v: v.update(v="openagents.eval-suite.v2"), Code.UNSUPPORTED_VERSION),
        (lambda v: v.pop("labels"), Code.MALFORMED),
    ],
)
def test_suite_rules(edit: Callable[[Any], object], code: Code) -> None:
    value = built()[0].to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        Suite.parse(value)
    assert caught.value.code is code


@pytest.mark.parametrize("gate", ["ext-eval-v1", "ext-eval-v2", "ext-eval-cost-v1"])
def test_every_ext_eval_gate_is_accepted(gate: str) -> None:
    value = built()[0].to_json()
    value["acceptance"]["id"] = f"{AUTHOR}:gym-gates/{gate}"
    assert Suite.parse(value).gate == gate


def file_entry(path: str, media_type: str = "text/plain") -> dict[str, Any]:
    return {"path": path, "digest": digest_bytes(path.encode()), "size": len(path), "media_type": media_type}


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda v: v["files"].append(file_entry("suite.json")), Code.CONFLICT),
        (lambda v: v["files"].append(file_entry("./suite.json")), Code.CONFLICT),
        (lambda v: v["files"].append(file_entry("SUITE.json")), Code.CONFLICT),
        (lambda v: v["files"].append(file_entry("../x")), Code.MALFORMED),
        (lambda v: v["files"].append(file_entry("/x")), Code.MALFORMED),
        (lambda v: v["files"].append(file_entry("link", "application/x-symlink")), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["files"][0].update(owner="me"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["components"][0].update(kind="theme"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["components"][0].update(kind="program"), Code.MALFORMED),
        (lambda v: v["components"][0].update(kind="schema"), Code.INCOMPATIBLE),
        (lambda v: v["components"].append(dict(v["components"][0])), Code.CONFLICT),
        (lambda v: v["provenance"].update(source="scraped"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v.update(package="not-a-package"), Code.MALFORMED),
        (lambda v: v.update(version="suite 1"), Code.MALFORMED),
        (lambda v: v.update(v="openagents.package.v2"), Code.UNSUPPORTED_VERSION),
        (lambda v: v.update(requires=["x"]), Code.UNSUPPORTED_FEATURE),
    ],
)
def test_manifest_rules(edit: Callable[[Any], object], code: Code) -> None:
    value = built()[5].to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        Manifest.parse(value)
    assert caught.value.code is code


@pytest.mark.parametrize(
    ("path", "media_type"),
    [("a/prompt.md", "text/markdown"), ("case.toml", "application/toml"), ("x.json", "application/json"),
     ("src/main.rs", "application/octet-stream"), (".hidden/file", "application/octet-stream")],
)  # fmt: skip
def test_media_types_by_extension(path: str, media_type: str) -> None:
    assert media_type_for(path) == media_type


def test_the_release_body_is_the_wire_example_byte_for_byte() -> None:
    manifest = ArtifactRef(
        digest="sha256:" + "1a" * 32, size=3456, media_type="application/json", schema=PACKAGE_SCHEMA
    )
    body = release_body(f"{AUTHOR}:repo-map-brief-tests", "suite-1a2b3c4d5e6f", manifest)
    assert body == (
        '{"manifest":{"digest":"sha256:' + "1a" * 32 + '","media_type":"application/json",'
        '"schema":"openagents.package.v1","size":3456},"package":"' + AUTHOR + ':repo-map-brief-tests",'
        '"requires":[],"type":"release","v":1,"version":"suite-1a2b3c4d5e6f"}'
    )


def signed_release() -> Event:
    manifest = built()[5]
    parts = release(manifest.package, manifest.version, manifest.ref()[1])
    assert parts.tags == (("t", RELEASE_MARKER),)
    return sign(ROOT, parts.kind, parts.tags, parts.content, 1_790_000_000)


def test_a_signed_release_reads_back() -> None:
    event = signed_release()
    found = read_release(event)
    manifest = built()[5]
    assert (found.package, found.version, found.manifest) == (manifest.package, manifest.version, manifest.ref()[1])
    assert found.pointer() == {"id": event.id, "pubkey": AUTHOR, "kind": 3184}


def resigned(event: Event, tags: list[list[str]] | None = None, body: dict[str, Any] | None = None,
             key: SecretKey = ROOT, kind: int = 3184) -> Event:  # fmt: skip
    content = event.content if body is None else canonical(body).decode()
    return sign(key, kind, tags if tags is not None else event.tags, content, event.created_at)


def test_release_reader_rules() -> None:
    event = signed_release()
    body = read(event.content)
    other = SecretKey(hashlib.sha256(b"mallory").digest())
    cases: list[tuple[Event, Code]] = [
        (replace(event, content=event.content.replace('"v":1', '"v":1 ')), Code.IDENTITY_MISMATCH),
        (resigned(event, tags=[["t", "oa:ext:listing:v1"]]), Code.IDENTITY_MISMATCH),
        (resigned(event, tags=[["t", RELEASE_MARKER], ["t", "oa:ext:listing:v1"]]), Code.MALFORMED),
        (resigned(event, tags=[]), Code.MALFORMED),
        (resigned(event, key=other), Code.IDENTITY_MISMATCH),
        (resigned(event, kind=3185), Code.IDENTITY_MISMATCH),
        (resigned(event, body=dict(body, v=2)), Code.UNSUPPORTED_VERSION),
        (resigned(event, body=dict(body, note="x")), Code.UNSUPPORTED_FEATURE),
        (resigned(event, body=dict(body, version="")), Code.MALFORMED),
        (resigned(event, body=dict(body, manifest={})), Code.MALFORMED),
    ]
    for forged, code in cases:
        with pytest.raises(ContractError) as caught:
            read_release(forged)
        assert caught.value.code is code, forged.content
