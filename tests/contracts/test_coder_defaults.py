"""The `coder-defaults` documents as a runtime reads them (`contracts.coder_defaults`): which release is
current, which dependencies a live admission admits and which have lapsed, the lock a run records, and the
admission parser's typed refusals. The fuzz tests hold every reader to `ContractError` (or a plain None)
on hostile bytes and mutated documents."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_runner.contracts.coder_defaults import (
    Admission,
    Defaults,
    current,
    documents,
    package_of,
    wanted_digests,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import Manifest
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, canonical, digest_bytes
from eval_runner.nostr import SecretKey
from tests.support.coder_defaults import (
    YEAR,
    admission_value,
    adoption,
    artifact,
    manifest_value,
    release_event,
)

OPERATOR = SecretKey(hashlib.sha256(b"coder-defaults: operator").digest())
STRANGER = SecretKey(hashlib.sha256(b"coder-defaults: stranger").digest())
ROOT = OPERATOR.public_key().to_hex()
PACKAGE = package_of(ROOT)
NOW = 1_790_000_000
TOOL_RELEASE = hashlib.sha256(b"the tool's release").hexdigest()
TOOL_AUTHOR = hashlib.sha256(b"the tool's author").hexdigest()


def subject(release: str = TOOL_RELEASE) -> dict[str, JsonValue]:
    return {
        "id": f"{TOOL_AUTHOR}:codebase-brief/codebase-brief",
        "artifact": artifact(b'{"v":1}', schema="openagents.coder-package.v1"),
        "event": {"id": release, "pubkey": TOOL_AUTHOR, "kind": 3184},
    }


def test_an_adoption_admits_its_tool_and_the_lock_reads_back() -> None:
    made = adoption(OPERATOR, subject(), now=NOW - 10)
    held = documents(made.documents)
    found = current([made.release], PACKAGE, held, NOW)
    assert found is not None
    assert found.release.id == made.release.id
    assert found.release.kind == 3184
    assert found.version == "1"
    assert found.manifest == digest_bytes(made.manifest)
    assert found.subjects() == (TOOL_RELEASE,)
    assert found.admitted[0].admission == digest_bytes(made.admission)
    assert found.admitted[0].definition == subject()["id"]
    assert found.lapsed == ()
    lock = found.lock_document()
    assert lock == canonical(json.loads(lock))  # JCS bytes
    assert Defaults.parse_lock(lock) == found


def test_without_its_manifest_a_release_is_no_defaults_and_the_reader_asks_for_it() -> None:
    made = adoption(OPERATOR, subject(), now=NOW - 10)
    assert current([made.release], PACKAGE, {}, NOW) is None
    assert wanted_digests(made.release, {}) == (digest_bytes(made.manifest),)
    with_manifest = documents([made.manifest])
    assert wanted_digests(made.release, with_manifest) == (digest_bytes(made.manifest), digest_bytes(made.admission))
    # The manifest alone: the release is current, and its dependency has lapsed (no admission held).
    found = current([made.release], PACKAGE, with_manifest, NOW)
    assert found is not None
    assert (found.admitted, found.lapsed) == ((), (TOOL_RELEASE,))


@pytest.mark.parametrize(
    ("expires_at", "decision", "release"),
    [
        (NOW, "admit", TOOL_RELEASE),  # lapses at its expiry
        (NOW + YEAR, "reject", TOOL_RELEASE),
        (NOW + YEAR, "inconclusive", TOOL_RELEASE),
        (NOW + YEAR, "admit", "ab" * 32),  # admits another release than the one depended on
    ],
)
def test_a_dependency_without_a_live_admit_has_lapsed(expires_at: int, decision: str, release: str) -> None:
    made = adoption(OPERATOR, subject(release), now=NOW - 10, expires_at=expires_at, decision=decision)
    manifest = canonical(
        manifest_value(ROOT, "1", [TOOL_RELEASE], [artifact(made.admission, schema="openagents.eval-admission.v1")])
    )
    event = release_event(OPERATOR, manifest, version="1", created_at=NOW - 10)
    found = current([event], PACKAGE, documents([manifest, made.admission]), NOW)
    assert found is not None
    assert (found.admitted, found.lapsed) == ((), (TOOL_RELEASE,))


def test_the_newest_valid_release_of_the_package_is_current() -> None:
    older = adoption(OPERATOR, subject(), now=NOW - 100, version="1")
    newer_manifest = canonical(manifest_value(ROOT, "2", [], []))
    newer = release_event(OPERATOR, newer_manifest, version="2", created_at=NOW - 50)
    # A later release whose manifest nobody holds does not count, nor does another package's.
    unheld = release_event(OPERATOR, canonical(manifest_value(ROOT, "3", [], [])), version="3", created_at=NOW - 1)
    other_root = STRANGER.public_key().to_hex()
    other_manifest = canonical(manifest_value(other_root, "9", [], []))
    other = release_event(STRANGER, other_manifest, version="9", created_at=NOW - 1)
    held = documents([*older.documents, newer_manifest, other_manifest])
    found = current([newer, older.release, unheld, other, newer], PACKAGE, held, NOW)
    assert found is not None
    assert (found.release.id, found.version, found.admitted, found.lapsed) == (newer.id, "2", (), ())
    assert current([older.release], PACKAGE, held, NOW) is not None


def test_a_release_whose_manifest_bytes_differ_is_not_read() -> None:
    made = adoption(OPERATOR, subject(), now=NOW - 10)
    spoiled = made.manifest.replace(b'"1"', b'"2"')
    # Held under the digest the release pins, but not those bytes.
    held = {digest_bytes(made.manifest): spoiled, digest_bytes(made.admission): made.admission}
    assert current([made.release], PACKAGE, held, NOW) is None


def refusal(value: Any) -> ContractError:
    with pytest.raises(ContractError) as caught:
        Admission.parse_bytes(canonical(value))
    return caught.value


def test_the_admission_parser_names_the_field_it_refuses() -> None:
    good = admission_value(ROOT, subject(), expires_at=NOW)
    assert Admission.parse_bytes(canonical(good)).subject.id == subject()["id"]

    no_validation = {key: value for key, value in good.items() if key != "validation"}
    found = refusal(no_validation)
    assert (found.code, found.path) == (Code.NOT_ADMITTED, "validation")
    assert Admission.parse_bytes(canonical({**no_validation, "decision": "reject"})).validation == ()

    found = refusal({**good, "surprise": 1})
    assert (found.code, found.path) == (Code.UNSUPPORTED_FEATURE, "surprise")
    found = refusal({**good, "v": "openagents.eval-admission.v2"})
    assert (found.code, found.path) == (Code.UNSUPPORTED_VERSION, "v")
    found = refusal({**good, "decision": "maybe"})
    assert (found.code, found.path) == (Code.UNSUPPORTED_FEATURE, "decision")
    found = refusal({**good, "issuer": "ROOT"})
    assert (found.code, found.path) == (Code.MALFORMED, "issuer")
    found = refusal({key: value for key, value in good.items() if key != "expires_at"})
    assert (found.code, found.path) == (Code.MALFORMED, "expires_at")
    found = refusal({**good, "stakes": {"severity": "low", "authority": "root", "reversibility": "costly"}})
    assert (found.code, found.path) == (Code.UNSUPPORTED_FEATURE, "stakes.authority")
    found = refusal({**good, "reports": [{"digest": "sha256:00", "size": 1, "media_type": "application/json"}]})
    assert found.path == "reports[0].digest"


def test_a_recorded_lock_refuses_what_is_not_a_lock() -> None:
    made = adoption(OPERATOR, subject(), now=NOW - 10)
    found = current([made.release], PACKAGE, documents(made.documents), NOW)
    assert found is not None
    value = json.loads(found.lock_document())
    for spoil, path in (
        ({**value, "v": "x"}, "v"),
        ({**value, "extra": []}, "extra"),
        ({**value, "release": {**value["release"], "kind": 1}}, "release.kind"),
    ):
        with pytest.raises(ContractError) as caught:
            Defaults.parse_lock(canonical(spoil))
        assert caught.value.path == path


# --- fuzz -------------------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.text(max_size=10)
    | st.sampled_from(["admit", "reject", ROOT, "sha256:" + "0" * 64, TOOL_RELEASE, 3184, ""])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
GOOD_ADMISSION = admission_value(ROOT, subject(), expires_at=NOW + YEAR)
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mutate(value: Any, path: list[Any], replacement: Any) -> Any:
    """`value` with the member at `path` (as far as it exists) replaced or, for None, removed."""
    out = copy.deepcopy(value)
    node = out
    for step in path[:-1]:
        in_list = isinstance(node, list) and isinstance(step, int) and step < len(node)
        child = node.get(step) if isinstance(node, dict) else node[step] if in_list else None
        if child is None:
            return out
        node = child
    last = path[-1] if path else None
    if isinstance(node, dict) and isinstance(last, str):
        if replacement is None:
            node.pop(last, None)
        else:
            node[last] = replacement
    return out


KEYS = st.sampled_from([*GOOD_ADMISSION, "meta", "stakes", "authority", "marginal"])
PATHS = st.lists(
    st.one_of(KEYS, st.sampled_from(["event", "artifact", "id", "kind", "digest"])), min_size=1, max_size=3
)


@fuzz
@given(st.binary(max_size=300))
def test_admission_bytes_give_a_record_or_a_contract_error(data: bytes) -> None:
    try:
        found = Admission.parse_bytes(data)
    except ContractError:
        return
    assert found.decision in ("admit", "reject", "inconclusive")


@fuzz
@given(PATHS, JSON)
def test_mutated_admissions_give_a_record_or_a_contract_error(path: list[Any], replacement: Any) -> None:
    value = mutate(GOOD_ADMISSION, path, replacement)
    try:
        found = Admission.parse_bytes(canonical(value))
    except ContractError:
        return  # a typed refusal is an answer
    assert found.decision != "admit" or found.validation, "an admit always cites a validation"
    assert len(found.issuer) == 64


MANIFEST_PATHS = st.lists(
    st.sampled_from(["dependencies", "provenance", "receipts", "package", "version", 0, "v", "files"]),
    min_size=1,
    max_size=3,
)


@fuzz
@given(MANIFEST_PATHS, JSON, PATHS, JSON, st.integers(min_value=0, max_value=2 * NOW))
def test_mutated_documents_never_break_the_reader(
    manifest_path: list[Any], manifest_part: Any, admission_path: list[Any], admission_part: Any, now: int
) -> None:
    admission = canonical(mutate(GOOD_ADMISSION, admission_path, admission_part))
    receipt = artifact(admission, schema="openagents.eval-admission.v1")
    manifest_doc = mutate(manifest_value(ROOT, "1", [TOOL_RELEASE], [receipt]), manifest_path, manifest_part)
    manifest = canonical(manifest_doc)
    event = release_event(OPERATOR, manifest, version="1", created_at=NOW)
    held = documents([manifest, admission])
    wanted = wanted_digests(event, held)
    assert wanted[0] == digest_bytes(manifest)
    found = current([event], PACKAGE, held, now)
    if found is None:
        return
    assert found.release.id == event.id
    dependencies = Manifest.parse_bytes(manifest).dependencies
    assert len(found.admitted) + len(found.lapsed) == len(dependencies), "each dependency is admitted or lapsed"
    assert all(item.expires_at > now for item in found.admitted)
    assert Defaults.parse_lock(found.lock_document()) == found


@fuzz
@given(st.binary(max_size=300) | JSON.map(lambda value: canonical(value)))
def test_lock_bytes_give_a_lock_or_a_contract_error(data: bytes) -> None:
    try:
        found = Defaults.parse_lock(data)
    except ContractError:
        return
    assert Defaults.parse_lock(found.lock_document()) == found
