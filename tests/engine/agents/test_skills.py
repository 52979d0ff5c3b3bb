"""Skills as the files Claude Code and Codex read: one SKILL.md writer (`engine/testset/skills.py`), every
installed SKILL.md with the standard's name and description, placed owned by the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from eval_runner.engine.agents.skills import installed_skill, place, place_skills
from eval_runner.engine.run.layout import RefusedError
from eval_runner.engine.testset.catalog import Skill
from eval_runner.engine.testset.skills import SkillFile, parse_skill_md


def front_matter(data: bytes) -> dict[str, str]:
    text = data.decode()
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded


def placed(tmp_path: Path, skill: Skill) -> tuple[str, bytes]:
    """The one skill directory `place_skills` made, and its SKILL.md."""
    place_skills(tmp_path, "skills", (skill,), None)
    (folder,) = list((tmp_path / "skills").iterdir())
    return folder.name, (folder / "SKILL.md").read_bytes()


def test_a_plain_skill_gets_front_matter_from_its_name_and_first_line(tmp_path: Path) -> None:
    body = b'Survey the files first: "always".\nThen answer in three sentences.\n'
    folder, made = placed(tmp_path, Skill("brief", body))
    assert folder == "brief"
    assert front_matter(made) == {"name": "brief", "description": 'Survey the files first: "always".'}
    assert made.endswith(body)


def test_a_skill_md_goes_in_byte_for_byte(tmp_path: Path) -> None:
    data = b"---\nname: brief\ndescription: Brief.\n---\n\nBody.\n"
    assert placed(tmp_path, Skill("brief", data)) == ("brief", data)


@pytest.mark.parametrize(
    "data",
    [
        b"---\n\nMap the repository first.\n\n---\n\nThen answer.\n",  # opens with a Markdown rule
        b"---\ntitle: Brief\ntags: [maps]\n---\n\nMap the repository first.\n",  # front matter of another kind
        b"---\nname: Brief Notes\ndescription: d\n---\n\nMap the repository first.\n",  # a name off the standard
        b"---\r\ndescription: Maps.\r\n---\r\nMap the repository first.\r\n",  # no name
    ],
)
def test_a_file_opening_like_front_matter_still_reaches_the_agent_with_a_name_and_description(
    tmp_path: Path, data: bytes
) -> None:
    folder, made = placed(tmp_path, Skill("brief", data))
    assert folder == "brief"
    skill = parse_skill_md(made)  # the standard's rules, as the agent reads them
    assert skill.name == "brief"
    assert skill.description == "Map the repository first."
    assert "Map the repository first." in made.decode()


def test_a_skill_md_named_otherwise_is_installed_under_the_name_graders_count(tmp_path: Path) -> None:
    data = b"---\nname: other\ndescription: Maps.\nallowed-tools: Read\n---\n\nMap first.\n"
    folder, made = placed(tmp_path, Skill("brief", data))
    assert folder == "brief"
    assert front_matter(made) == {"name": "brief", "description": "Maps."}
    assert made.rstrip().endswith(b"Map first.")


def test_names_follow_the_standard() -> None:
    assert installed_skill(Skill("Codebase Brief", b"Look first.\n")).name == "codebase-brief"
    assert installed_skill(Skill("../", b"Look first.\n")).name == "chat-tool"
    long = "a" * 60
    assert installed_skill(Skill(long, b"Look first.\n")).name == long


def test_placing_refuses_a_path_out_and_owns_what_it_makes(tmp_path: Path) -> None:
    with pytest.raises(RefusedError):
        place(tmp_path, "a/../../b", b"x", None)
    owner = (os.getuid(), os.getgid())
    skill = Skill("brief", b"Look first.\n", (SkillFile("scripts/run.sh", b"echo hi\n"),))
    place_skills(tmp_path, ".claude/skills", (skill,), owner)
    made = tmp_path / ".claude" / "skills" / "brief"
    assert front_matter((made / "SKILL.md").read_bytes())["name"] == "brief"
    assert (made / "scripts" / "run.sh").read_bytes() == b"echo hi\n"
    assert (made.stat().st_uid, made.stat().st_gid) == owner
    (tmp_path / "x").mkdir()
    with pytest.raises(RefusedError):
        place_skills(tmp_path / "x", "skills", (Skill("tidy", b"T.\n", (SkillFile("../out", b"x"),)),), None)
