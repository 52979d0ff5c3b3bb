"""What the hosted runner will test: catalog tools (extension directories the operator lists) and
chat-made tools built only from a skill and catalog tools (runner.md §11, wire.md §18).

An extension directory is resolved as `openagents ext eval` resolves it, so a hosted result and a check
on someone's computer name the same subject: the DefinitionRef `<publisher>:<slug>/<program>` over the
package record's exact bytes. A request may also name the tool by the DefinitionRef of a Wasm guest its
program runs; both are matched by id and digest. Chat-made tools reuse the draft contract's `made_slug`
and `made_subject`. What we took from the reference where the spec is brief (the package record, what
`program.digest` digests, which file is the program) and what is not ported: decisions.md ("The test set").
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.contracts.draft import DraftTool, made_subject
from eval_runner.contracts.draft import made_slug as made_slug  # re-exported: a chat-made tool's slug
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.refs import SLUG, ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read
from eval_runner.engine.testset.foreign import FormatError
from eval_runner.engine.testset.skills import (
    SKILL_FILE,
    AgentSkill,
    SkillFile,
    agent_skill,
    is_skill_dir,
    resolve_skill_directory,
)
from eval_runner.errors import EvalRunnerError

PACKAGE_FILE = "package.json"
PROGRAMS_DIR = "programs"
SKILLS_DIR = "skills"
PACKAGE_VERSION = 1
LOCK_VERSION = 1
PACKAGE_SCHEMA = "openagents.coder-package.v1"
JSON_MEDIA = "application/json"
#: The key an unpublished extension's definition names (`openagents ext eval`'s "local" key).
LOCAL_KEY = "0" * 64
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PACKAGE_KEYS = frozenset(
    {
        "v",
        "slug",
        "name",
        "summary",
        "version",
        "publisher",
        "provenance",
        "trusted_publishers",
        "program",
        "questions",
        "sources",
        "policies",
        "capabilities",
        "requires",
        "compatibility",
        "eval_dir",
    }
)
#: The pinned lists: where each kind lives and which field of a file claims its name.
_PINNED = (
    ("questions", "questions", "id"),
    ("sources", "sources", "slug"),
    ("policies", "policies", "slug"),
    ("capabilities", "capabilities", "slug"),
)


class CatalogError(EvalRunnerError):
    """An extension directory that does not resolve; the message names the directory or file."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class NotAdmittedError(EvalRunnerError):
    """A subject the hosted runner does not test: wire code `not_admitted` with the reference's message."""

    code = "not_admitted"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def package_digest(text: str) -> str:
    """The digest a package record states for a file: hex SHA-256 of the text as one JSON string."""
    return hashlib.sha256(canonical(text)).hexdigest()


@dataclass(frozen=True, slots=True)
class PinnedName:
    """One component a package pins: its name and the digest its file's text must have."""

    name: str
    digest: str


@dataclass(frozen=True, slots=True)
class PackageRecord:
    """A parsed `package.json` (the fields the runner reads; the exact bytes are kept on the tool). A
    skill directory's record is made from its SKILL.md and has no program."""

    slug: str
    name: str
    summary: str
    version: str
    publisher: str
    provenance: str
    program: PinnedName | None
    pinned: tuple[tuple[str, tuple[PinnedName, ...]], ...]
    eval_dir: str | None


@dataclass(frozen=True, slots=True)
class Program:
    """One program a subject admits: its slug and the exact bytes of its file."""

    slug: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill a subject admits: its name (the file stem, or a SKILL.md's name), the exact bytes of its
    file, and (for a skill directory) the files beside its SKILL.md."""

    name: str
    data: bytes
    files: tuple[SkillFile, ...] = ()


@dataclass(frozen=True, slots=True)
class Subject:
    """The extension under test, resolved: what the subject arm admits beyond the baseline."""

    slug: str
    definition: DefinitionRef
    package_lock: JsonValue
    programs: tuple[Program, ...]
    skills: tuple[Skill, ...]

    def operations(self) -> frozenset[str]:
        """The operations the extension supplies (runner.md §13.2): each program's slug, each step's
        name, and each step's `binding.steps.<name>.module.operation`; and `skill:<name>` for each
        skill, the name an agent's use of it is graded by."""
        out: set[str] = {f"skill:{skill.name}" for skill in self.skills}
        for program in self.programs:
            out.add(program.slug)
            value = _loose_json(program.data)
            steps = _pointer(value, "/definition/steps")
            for step in steps if isinstance(steps, list) else []:
                name = step.get("name") if isinstance(step, dict) else None
                if isinstance(name, str):
                    out.add(name)
                    operation = _pointer(value, f"/binding/steps/{name}/module/operation")
                    if isinstance(operation, str):
                        out.add(operation)
        return frozenset(out)

    def agent_skills(self) -> tuple[AgentSkill, ...]:
        """The skills as an agent installs them (`engine/testset/skills.py`)."""
        return tuple(agent_skill(skill.name, skill.data, skill.files) for skill in self.skills)

    def program_grant(self) -> str:
        """`CODER_PROGRAMS`: the program slugs, comma-joined."""
        return ",".join(program.slug for program in self.programs)


@dataclass(frozen=True, slots=True)
class Tool:
    """One catalog tool: its name, directory, package record (parsed and exact bytes), lock, the subject
    the runner admits for it, its DefinitionRef and the DefinitionRefs of the Wasm guests it runs."""

    name: str
    root: Path
    package: PackageRecord
    record: bytes
    lock: dict[str, JsonValue]
    subject: Subject
    definition: DefinitionRef
    aliases: tuple[DefinitionRef, ...]

    def names(self, ref: DefinitionRef) -> bool:
        """Does `ref` name this tool: id and artifact digest of its own definition or of an alias."""
        return any(
            known.id == ref.id and known.artifact.digest == ref.artifact.digest
            for known in (self.definition, *self.aliases)
        )

    def lock_digest(self) -> str:
        return hashlib.sha256(canonical(self.lock)).hexdigest()

    def unchanged(self) -> bool:
        """Does the directory still resolve to the lock loaded at start?"""
        try:
            return resolve_extension(self.root).lock == self.lock
        except CatalogError:
            return False


# --- resolving a directory -----------------------------------------------------------------------


def _leaks_host(value: str) -> bool:
    lower = value.lower()
    secrets = ("nsec1", "oak_", "api_key", "begin openssh", "begin private key")
    return any(word in lower for word in secrets) or any(word.startswith(("/", "~/")) for word in value.split())


def _string(found: dict[str, Any], key: str, where: str) -> str:
    value = found.get(key, "")
    if not isinstance(value, str):
        raise CatalogError(f"{where}: `{key}` must be a string")
    return value


def _pinned_name(value: JsonValue, what: str, where: str) -> PinnedName:
    if not isinstance(value, dict) or set(value) != {"name", "digest"}:
        raise CatalogError(f"{where}: {what} must be exactly {{name, digest}}")
    name, digest = value["name"], value["digest"]
    if not isinstance(name, str) or not isinstance(digest, str):
        raise CatalogError(f"{where}: {what} name and digest must be strings")
    if not _HEX64.fullmatch(digest):
        raise CatalogError(f"{where}: {what} {name!r} states {digest!r}, which is not a digest")
    return PinnedName(name, digest)


def parse_package(data: bytes, where: str) -> PackageRecord:
    """A package record from `package.json`'s bytes; `where` names the file in errors."""
    try:
        found = read(data)
    except ContractError as error:
        raise CatalogError(f"{where}: {error.message}") from None
    if not isinstance(found, dict):
        raise CatalogError(f"{where}: a package record is a JSON object")
    unknown = sorted(set(found) - _PACKAGE_KEYS)
    if unknown:
        raise CatalogError(f"{where}: unknown field `{unknown[0]}`")
    for key in ("v", "slug", "program"):
        if key not in found:
            raise CatalogError(f"{where}: missing field `{key}`")
    if found["v"] != PACKAGE_VERSION or isinstance(found["v"], bool):
        raise CatalogError(f"{where}: body version is {found['v']}, this version reads {PACKAGE_VERSION}")
    slug = found["slug"]
    if not isinstance(slug, str) or not SLUG.fullmatch(slug):
        raise CatalogError(f"{where}: slug {slug!r} is not a package slug")
    program = _pinned_name(found["program"], "the program", where)
    if not SLUG.fullmatch(program.name):
        raise CatalogError(f"{where}: the program names {program.name!r}, which is not an identifier it resolves")
    texts = {key: _string(found, key, where) for key in ("name", "summary", "version", "publisher", "provenance")}
    eval_dir = found.get("eval_dir")
    if eval_dir is not None and not isinstance(eval_dir, str):
        raise CatalogError(f"{where}: `eval_dir` must be a string")
    for key, text in (*texts.items(), ("eval_dir", eval_dir or "")):
        if _leaks_host(text):
            raise CatalogError(f"{where}: {key} carries a host path or a secret, which a portable package cannot")
    trusted = found.get("trusted_publishers", [])
    if not isinstance(trusted, list) or not all(isinstance(item, str) for item in trusted):
        raise CatalogError(f"{where}: `trusted_publishers` must be a list of strings")
    pinned = []
    for key, _, _ in _PINNED:
        items = found.get(key, [])
        if not isinstance(items, list):
            raise CatalogError(f"{where}: `{key}` must be a list")
        names = tuple(_pinned_name(item, key, where) for item in items)
        if len({item.name for item in names}) != len(names):
            raise CatalogError(f"{where}: {key} names a component twice")
        pinned.append((key, names))
    if found.get("requires", []):
        raise CatalogError(f"{where}: depends on other packages, which this runner does not resolve")
    if found.get("compatibility", {}):
        raise CatalogError(f"{where}: states a compatibility requirement this runner cannot check")
    return PackageRecord(
        slug=slug,
        name=texts["name"],
        summary=texts["summary"],
        version=texts["version"],
        publisher=texts["publisher"],
        provenance=texts["provenance"],
        program=program,
        pinned=tuple(pinned),
        eval_dir=eval_dir,
    )


def _loose_json(data: bytes) -> JsonValue:
    """A registry file as the reference reads it (`serde_json::Value`): `None` when it does not parse."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _pointer(value: JsonValue, pointer: str) -> JsonValue:
    """RFC 6901 lookup, `None` when nothing is there."""
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(token)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def _claimed_name(value: JsonValue, field: str) -> str | None:
    if not isinstance(value, dict):
        return None
    ident = _pointer(value, "/definition/id")
    if field == "slug" and isinstance(ident, str):
        return ident.rsplit("/", 1)[-1]
    claimed = value.get(field)
    return claimed if isinstance(claimed, str) else None


def _pin(root: Path, folder: str, field: str, pinned: PinnedName) -> dict[str, JsonValue]:
    """The file under `root/folder` whose record claims `pinned.name`, checked against its digest."""
    component = f"{folder}/{pinned.name}"
    directory = root / folder
    candidates = sorted(directory.glob("*.json")) if directory.is_dir() else []
    for path in candidates:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if _claimed_name(_loose_json(data), field) != pinned.name:
            continue
        try:
            found = package_digest(data.decode("utf-8"))
        except UnicodeDecodeError:
            break
        if found != pinned.digest:
            raise CatalogError(f"{component}: states {pinned.digest}, and the bytes here digest to {found}")
        return {"digest": found, "found": path.relative_to(root).as_posix()}
    raise CatalogError(f"{component}: nothing on this machine answers it")


def _skills(directory: Path) -> tuple[Skill, ...]:
    """Every regular `*.md` file directly in `skills/`, sorted by name; a missing directory is none."""
    if not directory.is_dir():
        return ()
    out = []
    for path in sorted(directory.iterdir()):
        if path.suffix == ".md" and stat.S_ISREG(path.lstat().st_mode):
            out.append(Skill(path.stem, path.read_bytes()))
    return tuple(out)


def _aliases(program: bytes) -> tuple[DefinitionRef, ...]:
    """The DefinitionRefs of the Wasm guests a program's `module` steps run; invalid ones are skipped."""
    steps = _pointer(_loose_json(program), "/definition/steps")
    out = []
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and step.get("kind") == "module" and "target" in step:
            try:
                out.append(DefinitionRef.parse(step["target"], "target"))
            except ContractError:
                continue
    return tuple(out)


def resolve_skill_dir(root: Path) -> Tool:
    """A skill directory (a SKILL.md, no package record) as a catalog tool with no program, named as a
    chat-made tool is (decisions.md, "Skill directories as extensions")."""
    try:
        found = resolve_skill_directory(root, LOCAL_KEY)
    except FormatError as error:
        raise CatalogError(f"{root}: the skill doesn't resolve: {error}") from None
    skill, version = found.skill, dict(found.skill.metadata).get("version", "")
    package = PackageRecord(
        found.slug, skill.name, skill.description, version, found.publisher, SKILL_FILE, None, (), None
    )
    skills = (Skill(skill.name, skill.skill_md(), skill.files),)
    subject = Subject(found.slug, found.definition, found.lock, (), skills)
    return Tool(skill.name, root, package, found.record, found.lock, subject, found.definition, ())


def resolve_extension(root: Path) -> Tool:
    """Resolve the extension directory `root` into a catalog tool (runner.md §11.1); a skill directory
    resolves through `resolve_skill_dir`."""
    if is_skill_dir(root):
        return resolve_skill_dir(root)
    record_path = root / PACKAGE_FILE
    try:
        record = record_path.read_bytes()
    except OSError as error:
        raise CatalogError(f"{record_path}: {error.strerror or error}") from None
    package = parse_package(record, str(record_path))
    program_name = package.program
    if program_name is None:  # parse_package always names one; only a skill directory has none
        raise CatalogError(f"{record_path}: missing field `program`")
    try:
        program_pin = _pin(root, PROGRAMS_DIR, "slug", program_name)
        pins: dict[str, JsonValue] = {}
        for (key, names), (_, folder, field) in zip(package.pinned, _PINNED, strict=True):
            pins[key] = {item.name: _pin(root, folder, field, item) for item in names}
    except CatalogError as refusal:
        raise CatalogError(f"{root}: the package doesn't resolve: {refusal.message}") from None
    lock: dict[str, JsonValue] = {
        "v": LOCK_VERSION,
        "slug": package.slug,
        "publisher": package.publisher,
        "provenance": package.provenance,
        "program": program_pin,
        **pins,
        "dependencies": {},
    }
    program_path = root / str(program_pin["found"])
    try:
        program = program_path.read_bytes()
    except OSError as error:
        raise CatalogError(f"{program_path}: {error.strerror or error}") from None
    publisher = package.publisher if _HEX64.fullmatch(package.publisher) else LOCAL_KEY
    definition_value = {
        "id": f"{publisher}:{package.slug}/{program_name.name}",
        "artifact": ArtifactRef.of_bytes(record, JSON_MEDIA, PACKAGE_SCHEMA).to_json(),
    }
    try:
        definition = DefinitionRef.parse(definition_value, "definition")
    except ContractError as error:
        raise CatalogError(f"{root}: {error.detail}") from None
    subject = Subject(
        slug=package.slug,
        definition=definition,
        package_lock=lock,
        programs=(Program(program_name.name, program),),
        skills=_skills(root / SKILLS_DIR),
    )
    return Tool(
        name=package.name,
        root=root,
        package=package,
        record=record,
        lock=lock,
        subject=subject,
        definition=definition,
        aliases=_aliases(program),
    )


# --- the catalog and chat-made tools -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Catalog:
    """The tools the runner admits, in the order the operator listed them."""

    tools: tuple[Tool, ...] = ()

    @classmethod
    def load(cls, roots: Sequence[Path]) -> Catalog:
        """Resolve every directory in order; the first that does not resolve is fatal."""
        return cls(tuple(resolve_extension(root) for root in roots))

    def find(self, ref: DefinitionRef) -> Tool | None:
        """The first tool naming `ref` by id and artifact digest (its own definition or an alias)."""
        return next((tool for tool in self.tools if tool.names(ref)), None)

    def by_id(self, ident: str) -> Tool | None:
        """The first tool whose own id or an alias id is `ident`."""
        return next(
            (tool for tool in self.tools if ident in (tool.definition.id, *(alias.id for alias in tool.aliases))),
            None,
        )

    def draft_subject(self, tool: DraftTool, requester: str) -> Subject:
        """The subject for a draft's tool (runner.md §11.4): the catalog tool it names, or a chat-made
        tool `requester` made from a skill and the catalog tools it turns on."""
        if tool.catalog is not None:
            found = self.find(tool.catalog)
            if found is None:
                raise NotAdmittedError(f"{tool.name} isn't a catalog tool, and the hosted runner tests only those")
            return found.subject
        if tool.skill is None:
            raise NotAdmittedError("a chat-made tool needs its skill")
        programs: list[Program] = []
        for ident in tool.uses:
            used = self.by_id(ident)
            if used is None:
                raise NotAdmittedError(
                    f"{ident} isn't a catalog tool, and a chat-made tool may turn on catalog tools only"
                )
            for program in used.subject.programs:
                if all(program.slug != known.slug for known in programs):
                    programs.append(program)
        slug = made_slug(tool.name)
        return Subject(
            slug=slug,
            definition=made_subject(tool, requester),
            package_lock={"made_in_chat": True, "uses": list(tool.uses)},
            programs=tuple(programs),
            skills=(Skill(slug, tool.skill.encode("utf-8")),),
        )
