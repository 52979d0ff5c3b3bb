"""Catalog: resolving extension directories, matching DefinitionRefs, and chat-made tool subjects."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from eval_runner.contracts.draft import DraftTool
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import canonical
from eval_runner.engine.testset.catalog import (
    LOCAL_KEY,
    Catalog,
    CatalogError,
    NotAdmittedError,
    made_slug,
    package_digest,
    resolve_extension,
)

PUBLISHER = "ab" * 32
REQUESTER = "11" * 32
GUEST = {
    "id": "aa" * 32 + ":openagents/repo-map",
    "artifact": {"digest": "sha256:" + "0f" * 32, "size": 134838, "media_type": "application/wasm"},
}


def program(ident: str, steps: list[dict[str, object]], binding: dict[str, object] | None = None) -> str:
    return json.dumps({"definition": {"v": 1, "id": ident, "steps": steps}, "binding": binding or {}}, indent=2) + "\n"


def extension(
    root: Path,
    *,
    slug: str = "map-brief",
    name: str = "Map brief",
    publisher: str = PUBLISHER,
    program_name: str = "map-brief",
    program_text: str | None = None,
    program_file: str = "programs/map-brief.json",
    skills: dict[str, str] | None = None,
    digest: str | None = None,
    extra: dict[str, object] | None = None,
) -> Path:
    text = program_text or program(
        f"{'aa' * 32}:openagents/{program_name}",
        [{"name": "repo_map", "kind": "module", "target": GUEST}, {"name": "answer", "kind": "delegate"}],
        {"steps": {"repo_map": {"module": {"operation": "map"}}}},
    )
    (root / program_file).parent.mkdir(parents=True, exist_ok=True)
    (root / program_file).write_text(text)
    for skill, body in (skills if skills is not None else {"brief": "Say what you mapped.\n"}).items():
        (root / "skills").mkdir(exist_ok=True)
        (root / "skills" / skill).write_text(body)
    record = {
        "v": 1,
        "slug": slug,
        "name": name,
        "summary": "Maps, then briefs.",
        "version": "0.1.0",
        "publisher": publisher,
        "provenance": "local file",
        "program": {"name": program_name, "digest": digest or package_digest(text)},
        **(extra or {}),
    }
    (root / "package.json").write_text(json.dumps(record, indent=2) + "\n")
    return root


def test_the_package_digest_is_of_the_text_as_a_json_string() -> None:
    # Checked against the reference's changelog-entry fixture: its stated digest is this rule's.
    assert package_digest("abc") == hashlib.sha256(b'"abc"').hexdigest()
    assert package_digest('a\n"b\\\u00e9') == hashlib.sha256('"a\\n\\"b\\\\\u00e9"'.encode()).hexdigest()


def test_an_extension_resolves_to_its_definition_aliases_skills_and_lock(tmp_path: Path) -> None:
    root = extension(tmp_path / "ext", skills={"zeta.md": "Z\n", "alpha.md": "A\n", "notes.txt": "no"})
    os.symlink(root / "skills/alpha.md", root / "skills/linked.md")
    tool = resolve_extension(root)
    record = (root / "package.json").read_bytes()
    assert tool.name == "Map brief"
    assert tool.record == record
    assert tool.definition == DefinitionRef(
        id=f"{PUBLISHER}:map-brief/map-brief",
        artifact=ArtifactRef.of_bytes(record, "application/json", "openagents.coder-package.v1"),
    )
    assert tool.aliases == (DefinitionRef.parse(GUEST, "guest"),)
    assert [skill.name for skill in tool.subject.skills] == ["alpha", "zeta"]
    assert tool.subject.skills[0].data == b"A\n"
    assert tool.subject.programs[0].slug == "map-brief"
    assert tool.subject.programs[0].data == (root / "programs/map-brief.json").read_bytes()
    assert tool.subject.operations() == {"map-brief", "repo_map", "answer", "map", "skill:alpha", "skill:zeta"}
    assert tool.subject.program_grant() == "map-brief"
    assert tool.lock == {
        "v": 1,
        "slug": "map-brief",
        "publisher": PUBLISHER,
        "provenance": "local file",
        "program": {
            "digest": package_digest((root / "programs/map-brief.json").read_text()),
            "found": "programs/map-brief.json",
        },
        "questions": {},
        "sources": {},
        "policies": {},
        "capabilities": {},
        "dependencies": {},
    }
    assert tool.subject.package_lock == tool.lock
    assert tool.unchanged()
    (root / "skills/zeta.md").write_text("changed\n")
    assert tool.unchanged()  # skills are not pinned by the lock
    (root / "package.json").write_text((root / "package.json").read_text().replace("0.1.0", "0.1.1"))
    assert tool.unchanged()  # nor is the version label: the lock pins bytes, not labels
    (root / "package.json").write_text((root / "package.json").read_text().replace("local file", "a copy"))
    assert not tool.unchanged()
    (root / "programs/map-brief.json").write_text("{}\n")
    assert not tool.unchanged()


def test_a_non_hex_publisher_names_the_local_key(tmp_path: Path) -> None:
    tool = resolve_extension(extension(tmp_path, publisher="openagents"))
    assert tool.definition.id == f"{LOCAL_KEY}:map-brief/map-brief"
    assert LOCAL_KEY == "0" * 64
    upper = resolve_extension(extension(tmp_path / "upper", publisher=PUBLISHER.upper()))
    assert upper.definition.author == LOCAL_KEY


def test_the_program_is_found_by_the_name_it_claims_and_checked_against_its_digest(tmp_path: Path) -> None:
    tool = resolve_extension(extension(tmp_path / "other", program_file="programs/zz-other-file.json"))
    assert tool.lock["program"] == {
        "digest": package_digest((tmp_path / "other/programs/zz-other-file.json").read_text()),
        "found": "programs/zz-other-file.json",
    }
    with pytest.raises(CatalogError) as caught:
        resolve_extension(extension(tmp_path / "wrong", digest="0" * 64))
    assert "the package doesn't resolve: programs/map-brief: states " + "0" * 64 in caught.value.message
    assert str(tmp_path / "wrong") in caught.value.message
    with pytest.raises(CatalogError) as caught:
        resolve_extension(extension(tmp_path / "none", program_text=program(f"{'aa' * 32}:x/other-name", [])))
    assert "programs/map-brief: nothing on this machine answers it" in caught.value.message


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"colour": "red"}, "unknown field `colour`"),
        ({"v": 2}, "this version reads 1"),
        ({"slug": "Not A Slug"}, "not a package slug"),
        ({"requires": [{"package": "x"}]}, "depends on other packages"),
        ({"compatibility": {"coder": ">=1"}}, "compatibility"),
        ({"provenance": "built at /home/me/src"}, "host path or a secret"),
        ({"program": {"name": "map-brief", "digest": "xyz"}}, "not a digest"),
    ],
)
def test_a_bad_package_record_is_refused(tmp_path: Path, extra: dict[str, object], words: str) -> None:
    with pytest.raises(CatalogError) as caught:
        resolve_extension(extension(tmp_path, extra=extra))
    assert words in caught.value.message
    assert "package.json" in caught.value.message


def test_a_missing_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as caught:
        resolve_extension(tmp_path)
    assert "package.json" in caught.value.message


def test_invalid_alias_targets_are_skipped(tmp_path: Path) -> None:
    text = program(
        f"{'aa' * 32}:openagents/map-brief",
        [
            {"name": "bad", "kind": "module", "target": {"id": "not qualified", "artifact": GUEST["artifact"]}},
            {"name": "other", "kind": "delegate", "target": GUEST},
            {"name": "good", "kind": "module", "target": GUEST},
        ],
    )
    assert len(resolve_extension(extension(tmp_path, program_text=text)).aliases) == 1


def two_tools(tmp_path: Path) -> Catalog:
    first = extension(tmp_path / "first")
    second_guest = {**GUEST, "id": "aa" * 32 + ":openagents/code-search"}
    second = extension(
        tmp_path / "second",
        slug="finder",
        name="Finder",
        program_name="finder",
        program_file="programs/finder.json",
        program_text=program(
            f"{'aa' * 32}:openagents/finder", [{"name": "search", "kind": "module", "target": second_guest}]
        ),
    )
    return Catalog.load([first, second])


def test_matching_by_own_ref_alias_ref_and_id(tmp_path: Path) -> None:
    catalog = two_tools(tmp_path)
    first, second = catalog.tools
    assert [tool.name for tool in catalog.tools] == ["Map brief", "Finder"]
    assert catalog.find(first.definition) is first
    assert catalog.find(second.aliases[0]) is second
    renamed_size = DefinitionRef(
        id=first.definition.id,
        artifact=ArtifactRef(first.definition.artifact.digest, 1, "application/json"),
    )
    assert catalog.find(renamed_size) is first  # size and media type are not matched
    wrong = DefinitionRef(id=first.definition.id, artifact=ArtifactRef("sha256:" + "33" * 32, 1, "application/json"))
    assert catalog.find(wrong) is None
    wrong_alias = DefinitionRef(id=second.aliases[0].id, artifact=first.definition.artifact)
    assert catalog.find(wrong_alias) is None
    assert catalog.by_id(first.definition.id) is first
    assert catalog.by_id(second.aliases[0].id) is second
    assert catalog.by_id("cc" * 32 + ":someone/else") is None


def test_the_first_directory_that_does_not_resolve_is_fatal(tmp_path: Path) -> None:
    good = extension(tmp_path / "good")
    with pytest.raises(CatalogError) as caught:
        Catalog.load([good, tmp_path / "missing", extension(tmp_path / "bad", digest="1" * 64)])
    assert "missing" in caught.value.message


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Brief the Layout!", "brief-the-layout"),
        ("Brief the layout", "brief-the-layout"),
        ("  --Map++Brief--  ", "map-brief"),
        ("Grüß Gott", "gr-gott"),
        ("!!!", "chat-tool"),
        ("", "chat-tool"),
        ("a" * 60, "a" * 48),
        ("a" * 47 + " b", "a" * 47),
    ],
)
def test_made_slug(name: str, slug: str) -> None:
    assert made_slug(name) == slug


def test_a_chat_made_tool_is_built_from_catalog_parts_only(tmp_path: Path) -> None:
    catalog = two_tools(tmp_path)
    first, second = catalog.tools
    tool = DraftTool(
        name="Brief the layout",
        summary="Maps first, then says what it found.",
        catalog=None,
        skill="Say which folders matter.",
        uses=(first.aliases[0].id, second.definition.id, first.definition.id),
    )
    subject = catalog.draft_subject(tool, REQUESTER)
    assert [program.slug for program in subject.programs] == ["map-brief", "finder"]
    assert [(skill.name, skill.data) for skill in subject.skills] == [
        ("brief-the-layout", b"Say which folders matter.")
    ]
    assert subject.slug == "brief-the-layout"
    record = canonical({"name": tool.name, "summary": tool.summary, "skill": tool.skill, "uses": list(tool.uses)})
    assert subject.definition == DefinitionRef(
        id=f"{REQUESTER}:brief-the-layout/skill",
        artifact=ArtifactRef.of_bytes(record, "application/json", "openagents.eval-draft.v1"),
    )
    assert subject.package_lock == {"made_in_chat": True, "uses": list(tool.uses)}

    named = DraftTool(name="Map brief", summary="", catalog=first.aliases[0], skill=None, uses=())
    assert catalog.draft_subject(named, REQUESTER) is first.subject


def test_chat_made_tool_refusals(tmp_path: Path) -> None:
    catalog = two_tools(tmp_path)
    first = catalog.tools[0]
    foreign = "22" * 32 + ":someone/else"
    with pytest.raises(NotAdmittedError) as caught:
        catalog.draft_subject(DraftTool("Mine", "", None, "Do it.", (foreign,)), REQUESTER)
    assert caught.value.code == "not_admitted"
    assert (
        caught.value.message == f"{foreign} isn't a catalog tool, and a chat-made tool may turn on catalog tools only"
    )

    outside = DefinitionRef(id=first.definition.id, artifact=ArtifactRef("sha256:" + "33" * 32, 10, "application/json"))
    with pytest.raises(NotAdmittedError) as caught:
        catalog.draft_subject(DraftTool("Their tool", "", outside, None, ()), REQUESTER)
    assert caught.value.message == "Their tool isn't a catalog tool, and the hosted runner tests only those"

    with pytest.raises(NotAdmittedError) as caught:
        catalog.draft_subject(DraftTool("No skill", "", None, None, ()), REQUESTER)
    assert caught.value.message == "a chat-made tool needs its skill"
