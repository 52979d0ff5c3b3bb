"""References parse strictly and re-serialise to the same JCS bytes."""

from __future__ import annotations

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.strict_json import canonical

HEX = "ab" * 32
DIGEST = "sha256:" + "0f" * 32


def artifact(**extra: object) -> dict[str, object]:
    return {"digest": DIGEST, "size": 12, "media_type": "application/json", **extra}


def test_artifact_ref_round_trip_keeps_optional_keys_absent() -> None:
    plain = ArtifactRef.parse(artifact(), "a")
    assert plain.schema is None
    assert canonical(plain.to_json()) == canonical(artifact())
    full = artifact(schema="s.v1", event={"id": HEX, "pubkey": HEX, "kind": 3184}, sources=[{"url": "https://x"}])
    assert canonical(ArtifactRef.parse(full, "a").to_json()) == canonical(full)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (artifact(digest="sha256:abc"), "a.digest"),
        (artifact(size=-1), "a.size"),
        (artifact(size=True), "a.size"),
        (artifact(size=1.0), "a.size"),
        (artifact(media_type="Application/JSON"), "a.media_type"),
        (artifact(schema=""), "a.schema"),
        (artifact(schema=None), "a.schema"),
        (artifact(extra=1), "a.extra"),
        (artifact(sources=[{"url": "x", "event": {}}]), "a.sources[0]"),
        ({"digest": DIGEST, "size": 1}, "a.media_type"),
    ],
)
def test_artifact_ref_refusals_name_the_field(value: object, path: str) -> None:
    with pytest.raises(ContractError) as caught:
        ArtifactRef.parse(value, "a")
    assert caught.value.path == path


def test_artifact_ref_matches_exact_bytes_only() -> None:
    ref = ArtifactRef.of_bytes(b"hello", "text/plain")
    assert ref.matches(b"hello")
    assert not ref.matches(b"hellO")
    assert not ref.matches(b"hello ")


def test_event_ref_kind_pinning_and_closed_shape() -> None:
    assert EventRef.parse({"id": HEX, "pubkey": HEX, "kind": 3184}, "s", kind=3184).kind == 3184
    with pytest.raises(ContractError, match="must be 3184"):
        EventRef.parse({"id": HEX, "pubkey": HEX, "kind": 3189}, "s", kind=3184)
    with pytest.raises(ContractError) as caught:
        EventRef.parse({"id": HEX, "pubkey": HEX, "kind": 1, "coordinate": "1:x:y"}, "s")
    assert caught.value.code is Code.UNSUPPORTED_FEATURE
    assert caught.value.path == "s.coordinate"
    assert EventRef.parse({"id": HEX, "pubkey": HEX, "kind": 1, "coordinate": "1:x:y"}, "s", allow_coordinate=True)


def test_definition_ref_needs_a_qualified_id() -> None:
    good = {"id": f"{HEX}:ext-eval/run", "artifact": artifact()}
    parsed = DefinitionRef.parse(good, "target")
    assert parsed.author == HEX
    assert canonical(parsed.to_json()) == canonical(good)
    for bad in (f"{HEX}:Ext/run", f"{HEX[:-1]}:ext/run", f"{HEX}:ext", f"{HEX}:ext/-x", "x:y/z"):
        with pytest.raises(ContractError) as caught:
            DefinitionRef.parse({"id": bad, "artifact": artifact()}, "target")
        assert caught.value.path == "target.id"
