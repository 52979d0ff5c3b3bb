"""An extension's skills as the files an agent reads (the Agent Skills standard), and files placed in a run.

Claude Code reads `<skills dir>/<name>/SKILL.md` (`~/.claude/skills`), Codex the same under
`$CODEX_HOME/skills`: YAML front matter with `name` and `description`, then the body the agent loads
when it decides to use the skill. A skill already written that way goes in byte for byte; an OpenAgents
skill (a plain Markdown file) gets front matter made from its name and its first sentence, so the agent
lists it the same way. Only the subject arm gets any.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from eval_runner.engine.run.layout import RefusedError
from eval_runner.engine.testset.catalog import Skill

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_DESCRIPTION_CHARS = 1024


def skill_md(name: str, data: bytes) -> bytes:
    """The SKILL.md for a skill: its own bytes when they open with front matter, else front matter made
    for it (the description is the body's first sentence, at most 1024 characters)."""
    if data.startswith((b"---\n", b"---\r\n")):
        return data
    text = data.decode("utf-8", "replace").strip()
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0] if text else name
    description = " ".join(first.split())[:_DESCRIPTION_CHARS] or name
    # JSON strings are YAML flow scalars, so any text is quoted safely.
    head = f"---\nname: {json.dumps(name)}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n\n"
    return head.encode() + text.encode() + b"\n"


def folder_name(name: str) -> str:
    """The skill's directory name: lower case, letters, digits and hyphens (the standard's rule)."""
    folded = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not _NAME.fullmatch(folded):
        raise RefusedError(f"skill name {name!r} makes no skill directory name")
    return folded


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
    """Each skill as `root/under/<name>/SKILL.md`, and the files a skill directory has beside it."""
    for skill in skills:
        folder = f"{under}/{folder_name(skill.name)}"
        place(root, f"{folder}/SKILL.md", skill_md(skill.name, skill.data), owner)
        for extra in skill.files:
            place(root, f"{folder}/{extra.path}", extra.data, owner)
