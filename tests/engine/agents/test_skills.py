"""Skills as the files Claude Code and Codex read: SKILL.md with front matter, placed owned by the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from eval_runner.engine.agents.skills import folder_name, place, place_skills, skill_md
from eval_runner.engine.run.layout import RefusedError
from eval_runner.engine.testset.catalog import Skill
from eval_runner.engine.testset.skills import SkillFile


def front_matter(data: bytes) -> dict[str, str]:
    text = data.decode()
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    loaded = yaml.safe_load(head)
    assert isinstance(loaded, dict)
    return loaded


def test_a_plain_skill_gets_front_matter_from_its_name_and_first_sentence() -> None:
    body = b'Survey the files first: "always". Then answer in three sentences.\n'
    made = skill_md("brief", body)
    assert front_matter(made) == {"name": "brief", "description": 'Survey the files first: "always".'}
    assert made.endswith(body)


def test_a_skill_md_goes_in_byte_for_byte() -> None:
    data = b"---\nname: brief\ndescription: Brief.\n---\n\nBody.\n"
    assert skill_md("brief", data) is data


def test_folder_names_follow_the_standard_and_refuse_what_makes_none() -> None:
    assert folder_name("Codebase Brief") == "codebase-brief"
    with pytest.raises(RefusedError):
        folder_name("../")


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
