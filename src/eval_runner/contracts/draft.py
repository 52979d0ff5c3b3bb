"""The test-set draft `openagents.eval-draft.v1` (wire.md §5.5, NIP-CJ) and the chat-made tool it names (§18).

A draft is what a person builds in chat: a tool (a catalog tool, or one made in chat from a skill) and up
to 16 tests whose prompt and grader texts are the exact bytes the runner writes to `evals/<id>/`. It is
data, never an instruction, so the parser is closed and bounded before anything touches a disk; the size
is checked first, so an oversized draft is refused before it is walked. Codes follow the reference
(`cj_conversation::parse_draft`; decisions.md, "The execution-side contracts").
"""

from __future__ import annotations

from dataclasses import dataclass

from eval_runner.contracts import shape
from eval_runner.contracts.case_id import MAX_GRADER_NAME_BYTES, case_id
from eval_runner.contracts.errors import Code
from eval_runner.contracts.refs import QUALIFIED_ID, ArtifactRef, DefinitionRef, qualified_id
from eval_runner.contracts.strict_json import JsonValue, canonical

DRAFT_SCHEMA = "openagents.eval-draft.v1"
MAX_DRAFT_BYTES = 65_536
MAX_DRAFT_CASES = 16
MAX_GRADERS = 16
MAX_USES = 8
MAX_NAME_CHARS = 80
MAX_SUMMARY_CHARS = 400
MAX_SKILL_BYTES = 16_384
MAX_SLUG_CHARS = 48
CASE_KINDS = ("should-fire", "should-not-fire")
MEDIA_JSON = "application/json"


def _blank(text: str) -> bool:
    return not text.strip()


def _text(value: JsonValue, path: str) -> str:
    """A non-blank string (prompts, grader texts)."""
    found = shape.string(value, path)
    if _blank(found):
        raise shape.fail(path, "must not be blank")
    return found


def _chars(value: JsonValue, path: str, limit: int) -> str:
    """A string of at most `limit` characters (code points, as the reference counts them)."""
    found = shape.string(value, path)
    if len(found) > limit:
        raise shape.fail(path, f"is {len(found)} characters; at most {limit}", Code.LIMIT_EXCEEDED)
    return found


@dataclass(frozen=True, slots=True)
class Grader:
    """One `graders/<name>.md`, whole: its TOML frontmatter and body."""

    name: str
    text: str

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Grader:
        found = shape.closed(value, path, ("name", "text"), unknown=Code.UNSUPPORTED_FEATURE)
        return cls(
            name=case_id(found["name"], shape.at(path, "name"), max_bytes=MAX_GRADER_NAME_BYTES),
            text=_text(found["text"], shape.at(path, "text")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, "text": self.text}


@dataclass(frozen=True, slots=True)
class DraftCase:
    """One test: its id, the kind the draft says, the whole `prompt.md`, and 1–16 graders in name order."""

    id: str
    kind: str
    prompt: str
    graders: tuple[Grader, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> DraftCase:
        found = shape.closed(value, path, ("id", "kind", "prompt", "graders"), unknown=Code.UNSUPPORTED_FEATURE)
        ident = case_id(found["id"], shape.at(path, "id"))
        kind = shape.choice(found["kind"], shape.at(path, "kind"), CASE_KINDS, Code.UNSUPPORTED_FEATURE)
        prompt = _text(found["prompt"], shape.at(path, "prompt"))
        graders_path = shape.at(path, "graders")
        items = shape.array(found["graders"], graders_path)
        if not 1 <= len(items) <= MAX_GRADERS:
            raise shape.fail(graders_path, f"must hold 1 to {MAX_GRADERS} graders; it holds {len(items)}")
        graders: list[Grader] = []
        for index, item in enumerate(items):
            grader = Grader.parse(item, shape.at(graders_path, index))
            if graders and graders[-1].name >= grader.name:
                raise shape.fail(shape.at(graders_path, index), "grader names must be unique and in increasing order")
            graders.append(grader)
        return cls(id=ident, kind=kind, prompt=prompt, graders=tuple(graders))

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "kind": self.kind,
            "prompt": self.prompt,
            "graders": [grader.to_json() for grader in self.graders],
        }


@dataclass(frozen=True, slots=True)
class DraftTool:
    """The tool under test: a catalog tool (`catalog` set) or one made in chat (`skill` set, `uses` its tools)."""

    name: str
    summary: str
    catalog: DefinitionRef | None
    skill: str | None
    uses: tuple[str, ...]

    @property
    def made_in_chat(self) -> bool:
        return self.catalog is None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> DraftTool:
        found = shape.closed(
            value, path, ("name", "summary", "catalog", "skill", "uses"), unknown=Code.UNSUPPORTED_FEATURE
        )
        name = _chars(found["name"], shape.at(path, "name"), MAX_NAME_CHARS)
        if _blank(name):
            raise shape.fail(shape.at(path, "name"), "must not be blank")
        summary = _chars(found["summary"], shape.at(path, "summary"), MAX_SUMMARY_CHARS)
        catalog = None
        if found["catalog"] is not None:
            catalog = DefinitionRef.parse(found["catalog"], shape.at(path, "catalog"))
        skill = None
        if found["skill"] is not None:
            skill = _skill(found["skill"], shape.at(path, "skill"))
        uses = _uses(found["uses"], shape.at(path, "uses"))
        # Exactly one kind of tool: a catalog tool names its definition and nothing else.
        if not ((catalog is not None and skill is None and not uses) or (catalog is None and skill is not None)):
            raise shape.fail(
                path,
                "a catalog tool names its definition with no skill or uses; "
                "a chat-made tool has no catalog definition and has a skill",
            )
        return cls(name=name, summary=summary, catalog=catalog, skill=skill, uses=uses)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "summary": self.summary,
            "catalog": None if self.catalog is None else self.catalog.to_json(),
            "skill": self.skill,
            "uses": list(self.uses),
        }


def _skill(value: JsonValue, path: str) -> str:
    # The reference refuses an over-long skill as malformed, not as a limit.
    if not isinstance(value, str) or _blank(value) or len(value.encode("utf-8", "surrogatepass")) > MAX_SKILL_BYTES:
        raise shape.fail(path, f"must be null or non-blank text of at most {MAX_SKILL_BYTES} bytes")
    return value


def _uses(value: JsonValue, path: str) -> tuple[str, ...]:
    items = shape.array(value, path)
    if len(items) > MAX_USES:
        raise shape.fail(path, f"names {len(items)} tools; at most {MAX_USES}")
    uses = tuple(qualified_id(item, shape.at(path, index)) for index, item in enumerate(items))
    if len(set(uses)) != len(uses):
        raise shape.fail(path, "names a tool twice")
    return uses


@dataclass(frozen=True, slots=True)
class Draft:
    """A checked draft; `to_json()` gives back the same JCS bytes it was parsed from."""

    tool: DraftTool
    cases: tuple[DraftCase, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Draft:
        size = len(canonical(value))
        if size > MAX_DRAFT_BYTES:
            raise shape.fail(path, f"the draft is {size} bytes of JCS; at most {MAX_DRAFT_BYTES}", Code.LIMIT_EXCEEDED)
        found = shape.closed(value, path, ("v", "tool", "cases"), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), DRAFT_SCHEMA)
        tool = DraftTool.parse(found["tool"], shape.at(path, "tool"))
        cases_path = shape.at(path, "cases")
        items = shape.array(found["cases"], cases_path, max_items=MAX_DRAFT_CASES)
        cases: list[DraftCase] = []
        seen: set[str] = set()
        for index, item in enumerate(items):
            case = DraftCase.parse(item, shape.at(cases_path, index))
            if case.id in seen:
                raise shape.fail(
                    shape.at(shape.at(cases_path, index), "id"), f"{case.id!r} is used twice", Code.CONFLICT
                )
            seen.add(case.id)
            cases.append(case)
        return cls(tool=tool, cases=tuple(cases))

    def to_json(self) -> dict[str, JsonValue]:
        return {"v": DRAFT_SCHEMA, "tool": self.tool.to_json(), "cases": [case.to_json() for case in self.cases]}


def made_slug(name: str) -> str:
    """The slug of a chat-made tool's name (runner.md §11.4): `"Brief the Layout!"` → `brief-the-layout`.

    ASCII letters and digits are kept, lowercased; any run of other characters becomes one `-`, never
    leading; the walk stops at 48 characters and a trailing `-` is dropped; nothing left → `chat-tool`.
    """
    slug = ""
    for char in name:
        if len(slug) >= MAX_SLUG_CHARS:
            break
        if char.isascii() and char.isalnum():
            slug += char.lower()
        elif slug and not slug.endswith("-"):
            slug += "-"
    return slug.rstrip("-") or "chat-tool"


def made_record(tool: DraftTool) -> bytes:
    """The bytes a chat-made tool's subject digests: JCS of its name, summary, skill and uses."""
    return canonical({"name": tool.name, "summary": tool.summary, "skill": tool.skill, "uses": list(tool.uses)})


def made_subject(tool: DraftTool, requester: str) -> DefinitionRef:
    """The subject DefinitionRef of a chat-made tool: `<requester>:<slug>/skill` over its record (§18)."""
    if not tool.made_in_chat:
        raise shape.fail("tool.catalog", "a catalog tool is named by its own definition, not made in chat")
    ident = qualified_id(f"{requester}:{made_slug(tool.name)}/skill", "requester")
    return DefinitionRef(id=ident, artifact=ArtifactRef.of_bytes(made_record(tool), MEDIA_JSON, DRAFT_SCHEMA))


def draft_suite_id(runner: str, tool: DraftTool) -> str:
    """The qualified id of a draft suite, which the runner authors: `<runner>:<slug>-tests/suite`."""
    ident = f"{runner}:{made_slug(tool.name)}-tests/suite"
    if QUALIFIED_ID.fullmatch(ident) is None:
        raise shape.fail("runner", "must be 64 lowercase hex characters")
    return ident
