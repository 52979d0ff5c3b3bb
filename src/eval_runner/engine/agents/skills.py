"""An extension's skills as the files an agent reads (the Agent Skills standard), and files placed in a run.

Claude Code reads `<skills dir>/<name>/SKILL.md` (`~/.claude/skills`), Codex the same under
`$CODEX_HOME/skills`: YAML front matter with `name` and `description`, then the body the agent loads
when it decides to use the skill. One writer makes every SKILL.md, `engine/testset/skills.py`'s
`agent_skill`: a file that is a SKILL.md by the standard's rules goes in byte for byte; anything else (an
OpenAgents skill's plain Markdown, a file opening with a Markdown rule or another front matter) gets
front matter made from its name and first line, so the agent always lists it by name and description.
Only the subject arm gets any.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from eval_runner.engine.run.layout import RefusedError
from eval_runner.engine.testset.catalog import Skill
from eval_runner.engine.testset.skills import AgentSkill, agent_skill, skill_name


def installed_skill(skill: Skill) -> AgentSkill:
    """The skill as the agent gets it, named as the graders count it (`skill:<name>`): a SKILL.md whose
    own `name` is not the catalog's (`skill_name` of it) is written again under the catalog's name, as
    the standard wants the directory and the `name` to agree."""
    made = agent_skill(skill.name, skill.data, skill.files)
    name = skill_name(skill.name)
    if made.name == name:
        return made
    return AgentSkill(name=name, description=made.description, body=made.body, files=made.files)


def place(root: Path, relative: str, data: bytes, owner: tuple[int, int] | None, mode: int = 0o644) -> Path:
    """Write `root/relative`, making its directories, all owned by `owner` (the sandbox's uid) when given,
    so the agent may write beside what the runner put there. Refuses a path that leaves `root`."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise RefusedError(f"{relative!r} is not a plain relative path")
    directory = root
    for part in [*parts[:-1]]:
        directory = directory / part
        if not directory.is_dir():
            directory.mkdir(mode=0o755)
            if owner is not None:
                os.chown(directory, *owner)
    target = directory / parts[-1]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
    return target


def make_home(home: Path, owner: tuple[int, int] | None) -> None:
    """The agent's HOME, writable by the sandbox's uid."""
    home.mkdir(mode=0o700, exist_ok=True)
    if owner is not None:
        os.chown(home, *owner)


def place_skills(root: Path, under: str, skills: Sequence[Skill], owner: tuple[int, int] | None) -> None:
    """Each skill as `root/under/<name>/SKILL.md` (`installed_skill`), and the files a skill directory has
    beside it."""
    for skill in skills:
        made = installed_skill(skill)
        folder = f"{under}/{made.name}"
        for relative, data in made.tree():
            place(root, f"{folder}/{relative}", data, owner)
