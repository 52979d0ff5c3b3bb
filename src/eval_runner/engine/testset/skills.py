"""Skills in the Agent Skills standard (`SKILL.md`: YAML front matter `name` and `description`, then a
Markdown body), the form Claude Code and Codex read them in.

An extension is either an OpenAgents package (`package.json`, its guidance in `skills/<name>.md`) or a
skill directory: a `SKILL.md` with its test set beside it. `skills_of` reads the skills of either as
`AgentSkill` records, which an agent adapter installs as `<skills dir>/<name>/SKILL.md` plus the
skill's own files in the with arm and never in the without arm. `skill_definition` names a skill
directory the way a chat-made tool is named, and `programs_left_out` says what another agent than
`coder` does not get. Decisions: decisions.md ("Skill directories as extensions").
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.contracts.draft import DRAFT_SCHEMA, MEDIA_JSON, DraftTool, made_record, made_slug
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, qualified_id
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes
from eval_runner.engine.testset.foreign import FormatCode, FormatError, load_yaml, read_inside, utf8_text

SKILL_FILE = "SKILL.md"
PACKAGE_FILE = "package.json"
GUIDANCE_DIR = "skills"
#: The directories of a skill the standard names; only these go in beside SKILL.md (never the test set).
SKILL_FILE_DIRS = ("scripts", "references", "assets")
MAX_SKILL_FILES = 256
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500
#: The agent that runs an OpenAgents extension's programs (Wasm guests); every other agent gets skills only.
PROGRAM_AGENT = "coder"
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FENCE = "---"
_RULE_CHARS = frozenset("-*_=~` ")


@dataclass(frozen=True, slots=True)
class SkillFile:
    """A file of a skill beside its SKILL.md: its path under the skill's directory and its bytes."""

    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class AgentSkill:
    """One skill as an agent reads it: `name` (its directory name under the agent's skills directory),
    `description` (what the agent lists to the model), `body` (what it reads when it uses the skill),
    its other files, and `source`, the SKILL.md bytes as written when it was one."""

    name: str
    description: str
    body: str
    files: tuple[SkillFile, ...] = ()
    source: bytes | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def skill_md(self) -> bytes:
        """The SKILL.md to install: the bytes as written, or front matter written for plain guidance."""
        if self.source is not None:
            return self.source
        name, described = json.dumps(self.name), json.dumps(self.description, ensure_ascii=False)
        front = f"{_FENCE}\nname: {name}\ndescription: {described}\n{_FENCE}\n"
        return f"{front}\n{self.body.strip()}\n".encode()

    def tree(self) -> tuple[tuple[str, bytes], ...]:
        """Every file of the installed skill, relative to `<skills dir>/<name>/`: SKILL.md first."""
        return ((SKILL_FILE, self.skill_md()), *((file.path, file.data) for file in self.files))


def _string(front: Mapping[str, Any], key: str, file: str, *, required: bool, limit: int | None = None) -> str | None:
    value = front.get(key)
    if value is None:
        if required:
            raise FormatError(FormatCode.MISSING, file, key, f"the front matter needs `{key}`")
        return None
    if not isinstance(value, str):
        raise FormatError(FormatCode.MALFORMED, file, key, f"`{key}` must be a string")
    if not value.strip():
        raise FormatError(FormatCode.MALFORMED, file, key, f"`{key}` is empty")
    if limit is not None and len(value) > limit:
        raise FormatError(FormatCode.TOO_LARGE, file, key, f"`{key}` is at most {limit} characters")
    return value


def split_front_matter(text: str, file: str) -> tuple[str | None, str]:
    """YAML front matter between `---` lines, and the body; (None, text) when the first line is not `---`."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r").rstrip() != _FENCE:
        return None, text
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r").rstrip() == _FENCE:
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1 :])
    raise FormatError(FormatCode.MALFORMED, file, None, "the front matter opens with --- and never closes")


def parse_skill_md(data: bytes, file: str = SKILL_FILE) -> AgentSkill:
    """A SKILL.md from its bytes: `name` (1 to 64 of a-z, 0-9 and single hyphens) and `description` (1
    to 1024 characters) are required; `license`, `compatibility`, `allowed-tools` must be strings and
    `metadata` a map of strings when given; other keys (Claude Code reads more) are left to the agent."""
    text = utf8_text(data, file)
    front_text, body = split_front_matter(text, file)
    if front_text is None:
        raise FormatError(FormatCode.MISSING, file, None, "a SKILL.md starts with YAML front matter between --- lines")
    front = load_yaml(front_text, file)
    if front is None:
        front = {}
    if not isinstance(front, dict):
        raise FormatError(FormatCode.MALFORMED, file, None, "the front matter must be a YAML mapping")
    for key in front:
        if not isinstance(key, str):
            raise FormatError(FormatCode.MALFORMED, file, str(key), "front matter keys are strings")
    name = _string(front, "name", file, required=True, limit=MAX_NAME_CHARS)
    assert name is not None
    if not _NAME.fullmatch(name):
        raise FormatError(
            FormatCode.MALFORMED,
            file,
            "name",
            f"`name` is `{name}`; it must be lowercase letters, digits and single hyphens, "
            "not starting or ending with one",
        )
    description = _string(front, "description", file, required=True, limit=MAX_DESCRIPTION_CHARS)
    assert description is not None
    _string(front, "license", file, required=False)
    _string(front, "compatibility", file, required=False, limit=MAX_COMPATIBILITY_CHARS)
    _string(front, "allowed-tools", file, required=False)
    metadata = front.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()
    ):
        raise FormatError(FormatCode.MALFORMED, file, "metadata", "`metadata` must map strings to strings")
    return AgentSkill(
        name=name,
        description=description,
        body=body,
        source=data,
        metadata=tuple(sorted(metadata.items())),
    )


def _yaml_printable(char: str) -> bool:
    """A character YAML lets a document hold as itself (YAML 1.1 `c-printable`, without NEL)."""
    code = ord(char)
    return 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF


def _first_sentence(body: str) -> str:
    """The first line that says something: not blank, not a Markdown rule or fence (`---`, `***`, `===`)."""
    for line in body.splitlines():
        line = "".join(char for char in line if _yaml_printable(char)).strip().lstrip("#").strip()
        if line and not set(line) <= _RULE_CHARS:
            return line[:MAX_DESCRIPTION_CHARS]
    return ""


def skill_name(name: str) -> str:
    """The name a skill is installed and counted under (`skill:<name>`): `name` itself when the standard
    allows it (1 to 64 of a-z, 0-9 and single hyphens), else its slug (`made_slug`)."""
    return name if len(name) <= MAX_NAME_CHARS and _NAME.fullmatch(name) else made_slug(name)


def agent_skill(name: str, data: bytes, files: Sequence[SkillFile] = ()) -> AgentSkill:
    """A skill from a name and its file's bytes: a SKILL.md is read as one; plain guidance (an
    OpenAgents package's `skills/<name>.md`, a chat-made tool's skill) is described by its first line,
    after any front matter of another kind (a YAML mapping that is not a SKILL.md's), and kept whole."""
    text = data.decode("utf-8", "replace")
    described = text
    try:
        front, rest = split_front_matter(text.removeprefix("\ufeff"), name)
    except FormatError:
        front, rest = None, text
    if front is not None:
        try:
            return _with_files(parse_skill_md(data, f"{name}.md"), files)
        except FormatError:
            pass  # guidance that only looks like a SKILL.md is plain guidance
        try:
            if isinstance(load_yaml(front, name), dict):
                described = rest
        except FormatError:
            pass  # not front matter: a Markdown rule opened the guidance
    slug = skill_name(name)
    description = _first_sentence(described) or _first_sentence(text) or f"Guidance from the {slug} extension."
    return AgentSkill(name=slug, description=description, body=text, files=tuple(files))


def _with_files(skill: AgentSkill, files: Sequence[SkillFile]) -> AgentSkill:
    return AgentSkill(skill.name, skill.description, skill.body, tuple(files), skill.source, skill.metadata)


def is_skill_dir(root: Path) -> bool:
    """A skill directory: a SKILL.md and no OpenAgents package record."""
    return (root / SKILL_FILE).is_file() and not (root / PACKAGE_FILE).exists()


def _skill_files(root: Path) -> tuple[SkillFile, ...]:
    """Every regular file under the skill's `scripts/`, `references/` and `assets/`; a link is refused."""
    out: list[SkillFile] = []
    for top in SKILL_FILE_DIRS:
        stack = [top]
        while stack:
            relative = stack.pop()
            try:
                info = (root / relative).lstat()
            except FileNotFoundError:
                continue
            except OSError as error:
                raise FormatError(FormatCode.MALFORMED, relative, None, error.strerror or str(error)) from None
            if stat.S_ISLNK(info.st_mode):
                raise FormatError(FormatCode.OUTSIDE, relative, None, "a skill's files are never links")
            if stat.S_ISDIR(info.st_mode):
                try:
                    names = sorted(os.listdir(root / relative))
                except OSError as error:
                    raise FormatError(FormatCode.MALFORMED, relative, None, error.strerror or str(error)) from None
                stack.extend(f"{relative}/{name}" for name in reversed(names))
                continue
            data = read_inside(root, relative, relative, None)
            if data is None:
                continue
            if len(out) == MAX_SKILL_FILES:
                raise FormatError(FormatCode.TOO_LARGE, top, None, f"a skill has at most {MAX_SKILL_FILES} files")
            out.append(SkillFile(relative, data))
    return tuple(sorted(out, key=lambda item: item.path))


def read_skill_dir(root: Path) -> AgentSkill:
    """The skill of a skill directory: its SKILL.md and its standard directories' files."""
    data = read_inside(root, SKILL_FILE, SKILL_FILE, None)
    if data is None:
        raise FormatError(FormatCode.MISSING, SKILL_FILE, None, f"{root} has no {SKILL_FILE}")
    return _with_files(parse_skill_md(data), _skill_files(root))


def skills_of(extension_dir: Path) -> tuple[AgentSkill, ...]:
    """The skills of an extension directory, for an agent to install: a skill directory's one skill, or
    an OpenAgents package's `skills/*.md` in name order (none when it has no such directory)."""
    if (extension_dir / SKILL_FILE).is_file() and not (extension_dir / PACKAGE_FILE).exists():
        return (read_skill_dir(extension_dir),)
    guidance = extension_dir / GUIDANCE_DIR
    if not guidance.is_dir():
        return ()
    out = []
    for path in sorted(guidance.iterdir()):
        if path.suffix == ".md" and stat.S_ISREG(path.lstat().st_mode):
            data = read_inside(extension_dir, f"{GUIDANCE_DIR}/{path.name}", f"{GUIDANCE_DIR}/{path.name}", None)
            if data is not None:
                out.append(agent_skill(path.stem, data))
    return tuple(out)


def skill_publisher(skill: AgentSkill, local_key: str) -> str:
    """Who a skill directory's definition is under: `metadata.publisher` when it is a 64-hex key, else
    the local key (as a package record's publisher that is not a key)."""
    publisher = dict(skill.metadata).get("publisher", "")
    return publisher if _HEX64.fullmatch(publisher) else local_key


def skill_record(skill: AgentSkill) -> bytes:
    """The bytes a skill directory's DefinitionRef digests: a chat-made tool's record (JCS of its name,
    summary, skill and uses) over the SKILL.md text, plus `files` (path → sha256) when it has any."""
    text = skill.skill_md().decode("utf-8", "replace")
    tool = DraftTool(name=skill.name, summary=skill.description, catalog=None, skill=text, uses=())
    if not skill.files:
        return made_record(tool)
    files: dict[str, JsonValue] = {file.path: digest_bytes(file.data) for file in skill.files}
    return canonical({"name": skill.name, "summary": skill.description, "skill": text, "uses": [], "files": files})


def skill_definition(skill: AgentSkill, key: str) -> tuple[DefinitionRef, bytes]:
    """`<key>:<slug>/skill` over `skill_record`, as `contracts.draft.made_subject` names a chat-made tool
    (a lone SKILL.md with no files gets exactly the chat-made tool's reference); and the record's bytes."""
    record = skill_record(skill)
    ident = qualified_id(f"{key}:{made_slug(skill.name)}/skill", "publisher")
    return DefinitionRef(id=ident, artifact=ArtifactRef.of_bytes(record, MEDIA_JSON, DRAFT_SCHEMA)), record


@dataclass(frozen=True, slots=True)
class ProgramsLeftOut:
    """What to say when an extension's programs do not go in: a line before the run starts, and the
    sentence the report's limitations carry."""

    notice: str
    limitation: str


def programs_left_out(programs: Sequence[str], agent_kind: str) -> ProgramsLeftOut | None:
    """None when `agent_kind` runs the programs (`coder`) or there are none; otherwise what to say: the
    programs are Wasm guests only `coder` runs, so the with arm gets the skills and not the programs."""
    if agent_kind == PROGRAM_AGENT or not programs:
        return None
    names = ", ".join(programs)
    word = "program" if len(programs) == 1 else "programs"
    return ProgramsLeftOut(
        notice=(
            f"programs: the extension's {word} ({names}) run only under coder, so {agent_kind} gets its skills "
            f"and not its {word}"
        ),
        limitation=(
            f"The extension's {word} ({names}) did not run: {agent_kind} got the extension's skills only, "
            "and only coder runs an extension's programs."
        ),
    )


@dataclass(frozen=True, slots=True)
class SkillDirectory:
    """A skill directory resolved as an extension: its skill, slug, publisher ("" when local), the
    DefinitionRef and the record it digests, and the lock a report pins."""

    skill: AgentSkill
    slug: str
    publisher: str
    definition: DefinitionRef
    record: bytes
    lock: dict[str, JsonValue]


def resolve_skill_directory(root: Path, local_key: str) -> SkillDirectory:
    """Read the skill directory `root` as an extension: named as a chat-made tool is (`skill_definition`),
    under `local_key` unless its `metadata.publisher` is a key."""
    skill = read_skill_dir(root)
    key = skill_publisher(skill, local_key)
    try:
        definition, record = skill_definition(skill, key)
    except ContractError as error:
        raise FormatError(FormatCode.MALFORMED, SKILL_FILE, "name", error.detail) from None
    publisher = "" if key == local_key else key
    lock: dict[str, JsonValue] = {
        "v": 1,
        "slug": made_slug(skill.name),
        "publisher": publisher,
        "provenance": SKILL_FILE,
        "skill": {"digest": digest_bytes(skill.skill_md()), "found": SKILL_FILE},
        "files": {file.path: digest_bytes(file.data) for file in skill.files},
        "dependencies": {},
    }
    return SkillDirectory(skill, made_slug(skill.name), publisher, definition, record, lock)
