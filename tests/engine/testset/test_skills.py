"""Skill directories: SKILL.md read as the Agent Skills standard, skills as agents install them, the
DefinitionRef a skill directory gets (a chat-made tool's), and what another agent than coder is told."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.contracts.draft import DraftTool, made_subject
from eval_runner.engine.testset.catalog import LOCAL_KEY, CatalogError, resolve_extension
from eval_runner.engine.testset.foreign import FormatCode, FormatError
from eval_runner.engine.testset.skills import (
    AgentSkill,
    SkillFile,
    agent_skill,
    is_skill_dir,
    parse_skill_md,
    programs_left_out,
    skill_definition,
    skills_of,
)
from tests.support.paths import EXAMPLE, REPO

SKILL_EXAMPLE = REPO / "examples" / "brief"
KEY = "ab" * 32


def skill_md(front: str, body: str = "Do the thing.\n") -> bytes:
    return f"---\n{front}---\n\n{body}".encode()


def skill_dir(root: Path, front: str = "name: tidy\ndescription: Tidies things.\n", body: str = "Tidy.\n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "SKILL.md").write_bytes(skill_md(front, body))
    return root


def test_a_skill_md_is_read_with_its_name_description_body_and_exact_bytes() -> None:
    data = skill_md(
        "name: pdf-forms\ndescription: Fills PDF forms.\nlicense: MIT\nmetadata:\n  version: '2'\n"
        "allowed-tools: Read Grep\nwhen_to_use: forms\n",
        "# Forms\n\nFill them.\n",
    )
    skill = parse_skill_md(data)
    assert (skill.name, skill.description) == ("pdf-forms", "Fills PDF forms.")
    assert skill.body == "\n# Forms\n\nFill them.\n"
    assert skill.metadata == (("version", "2"),)
    assert skill.skill_md() == data  # installed byte for byte
    assert skill.tree() == (("SKILL.md", data),)


@pytest.mark.parametrize(
    ("data", "code", "key"),
    [
        (b"no front matter\n", FormatCode.MISSING, None),
        (b"---\nname: x\n", FormatCode.MALFORMED, None),
        (skill_md("description: d\n"), FormatCode.MISSING, "name"),
        (skill_md("name: Tidy\ndescription: d\n"), FormatCode.MALFORMED, "name"),
        (skill_md("name: a--b\ndescription: d\n"), FormatCode.MALFORMED, "name"),
        (skill_md("name: -ab\ndescription: d\n"), FormatCode.MALFORMED, "name"),
        (skill_md(f"name: {'a' * 65}\ndescription: d\n"), FormatCode.TOO_LARGE, "name"),
        (skill_md("name: ab\n"), FormatCode.MISSING, "description"),
        (skill_md("name: ab\ndescription: '  '\n"), FormatCode.MALFORMED, "description"),
        (skill_md(f"name: ab\ndescription: {'d' * 1025}\n"), FormatCode.TOO_LARGE, "description"),
        (skill_md("name: ab\ndescription: 2024-01-01\n"), FormatCode.MALFORMED, "description"),
        (skill_md("name: ab\ndescription: d\nmetadata: {a: 1}\n"), FormatCode.MALFORMED, "metadata"),
        (skill_md("name: ab\ndescription: d\nlicense: [MIT]\n"), FormatCode.MALFORMED, "license"),
        (skill_md("- a\n- b\n"), FormatCode.MALFORMED, None),
        (skill_md("name: &n ab\ndescription: *n\n"), FormatCode.MALFORMED, None),  # no aliases
        (b"---\nname: ab\n\xff\n---\n", FormatCode.MALFORMED, None),
    ],
)
def test_a_bad_skill_md_is_a_typed_error_naming_the_field(data: bytes, code: FormatCode, key: str | None) -> None:
    with pytest.raises(FormatError) as caught:
        parse_skill_md(data, "SKILL.md")
    assert (caught.value.code, caught.value.file, caught.value.key) == (code, "SKILL.md", key)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(lambda text: f"---\n{text}\n---\nbody".encode()))
def test_reading_any_bytes_as_a_skill_md_never_crashes(data: bytes) -> None:
    try:
        skill = parse_skill_md(data)
    except FormatError as error:
        assert error.code in FormatCode  # noqa: PT017 - hypothesis drives this, not pytest.raises
        return
    assert parse_skill_md(skill.skill_md()) == skill


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(min_size=1, max_size=40))
def test_plain_guidance_becomes_a_skill_md_an_agent_can_read(body: str, stem: str) -> None:
    skill = agent_skill(stem, body.encode())
    if skill.source is None:  # plain guidance: the SKILL.md written for it reads back as the same skill
        again = parse_skill_md(skill.skill_md())
        assert (again.name, again.description) == (skill.name, skill.description)


def test_an_openagents_packages_guidance_is_described_by_its_first_line() -> None:
    (brief,) = skills_of(EXAMPLE)
    assert brief.name == "brief"
    assert brief.source is None
    assert brief.description.startswith("When someone asks about a repository")
    assert parse_skill_md(brief.skill_md()).name == "brief"


def test_the_example_skill_directory_is_one_skill_without_its_test_set() -> None:
    (brief,) = skills_of(SKILL_EXAMPLE)
    assert brief.name == "brief"
    assert brief.source == (SKILL_EXAMPLE / "SKILL.md").read_bytes()
    assert brief.files == ()  # evals/ never goes in beside the skill
    assert is_skill_dir(SKILL_EXAMPLE)
    assert not is_skill_dir(EXAMPLE)


def test_a_skills_standard_directories_go_in_and_nothing_else(tmp_path: Path) -> None:
    root = skill_dir(tmp_path / "tidy")
    for path in ("scripts/run.sh", "references/deep/guide.md", "assets/logo.txt", "evals/evals.json", "notes.md"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(path)
    (skill,) = skills_of(root)
    assert [file.path for file in skill.files] == ["assets/logo.txt", "references/deep/guide.md", "scripts/run.sh"]
    assert skill.files[2] == SkillFile("scripts/run.sh", b"scripts/run.sh")
    os.symlink(root / "notes.md", root / "scripts/linked.sh")
    with pytest.raises(FormatError) as caught:
        skills_of(root)
    assert caught.value.code is FormatCode.OUTSIDE


def test_a_lone_skill_md_is_named_exactly_as_the_same_chat_made_tool_is() -> None:
    (brief,) = skills_of(SKILL_EXAMPLE)
    definition, record = skill_definition(brief, KEY)
    text = brief.skill_md().decode()
    made = made_subject(DraftTool(name="brief", summary=brief.description, catalog=None, skill=text, uses=()), KEY)
    assert definition == made
    assert definition.id == f"{KEY}:brief/skill"
    assert definition.artifact.matches(record)


def test_a_skills_files_are_in_its_digest() -> None:
    bare = AgentSkill("tidy", "Tidies.", "Tidy.", source=skill_md("name: tidy\ndescription: Tidies.\n"))
    with_file = AgentSkill("tidy", "Tidies.", "Tidy.", (SkillFile("scripts/a.sh", b"1"),), bare.source)
    changed = AgentSkill("tidy", "Tidies.", "Tidy.", (SkillFile("scripts/a.sh", b"2"),), bare.source)
    digests = {skill_definition(skill, KEY)[0].artifact.digest for skill in (bare, with_file, changed)}
    assert len(digests) == 3


def test_a_skill_directory_resolves_as_a_catalog_tool_with_no_program(tmp_path: Path) -> None:
    root = tmp_path / "brief"
    shutil.copytree(SKILL_EXAMPLE, root)
    tool = resolve_extension(root)
    (brief,) = skills_of(root)
    assert tool.definition == skill_definition(brief, LOCAL_KEY)[0]
    assert tool.definition.artifact.matches(tool.record)
    assert tool.subject.programs == ()
    assert [skill.name for skill in tool.subject.skills] == ["brief"]
    assert tool.subject.skills[0].data == (root / "SKILL.md").read_bytes()
    assert tool.subject.operations() == {"skill:brief"}
    assert tool.subject.agent_skills() == (brief,)
    assert tool.package.program is None
    assert tool.lock["provenance"] == "SKILL.md"
    assert tool.unchanged()
    (root / "SKILL.md").write_bytes((root / "SKILL.md").read_bytes() + b"\nMore.\n")
    assert not tool.unchanged()
    assert resolve_extension(root).definition != tool.definition


def test_a_skill_directory_may_name_its_publisher_by_key(tmp_path: Path) -> None:
    root = skill_dir(tmp_path / "tidy", f"name: tidy\ndescription: Tidies.\nmetadata:\n  publisher: '{KEY}'\n")
    assert resolve_extension(root).definition.id == f"{KEY}:tidy/skill"
    other = skill_dir(tmp_path / "other", "name: tidy\ndescription: Tidies.\nmetadata:\n  publisher: me\n")
    assert resolve_extension(other).definition.id == f"{LOCAL_KEY}:tidy/skill"


def test_a_bad_skill_directory_does_not_resolve_and_says_why(tmp_path: Path) -> None:
    root = skill_dir(tmp_path / "tidy", "name: Tidy\ndescription: Tidies.\n")
    with pytest.raises(CatalogError, match="lowercase letters"):
        resolve_extension(root)


def test_another_agent_than_coder_is_told_the_programs_stay_out() -> None:
    assert programs_left_out(["codebase-brief"], "coder") is None
    assert programs_left_out([], "claude-code") is None
    said = programs_left_out(["codebase-brief"], "claude-code")
    assert said is not None
    assert said.notice == (
        "programs: the extension's program (codebase-brief) run only under coder, "
        "so claude-code gets its skills and not its program"
    )
    assert "did not run" in said.limitation
    assert "codebase-brief" in said.limitation
    assert said.limitation.endswith(".")
