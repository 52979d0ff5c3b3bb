"""How the pipeline fuzz spoils a request: edits to a signed `25920`, and to the body sealed inside one.

An `Edit` is a named change to a dict, made in place; its name is all hypothesis prints of it, so a
failing example reads as a list of what was done (`kind=1`, `created_at-601`, `flip content bit 93`,
`input.draft.cases[0].prompt = 'x' * 70000`). Event edits work on the event's fields (`tags` a list of
lists) and are followed by a signing step: none, the id recomputed over the old signature, or a fresh
signature by the trainer or by a stranger. Body edits are targeted (the hosted input's rules, one per
refusal the runner knows) or generic (drop, replace, retype or add a value anywhere in the tree, or put
a huge string there); the body is then written as canonical JSON, as spaced JSON, or ASCII-escaped
JSON when it holds what JCS can't write (non-finite numbers, lone surrogates, unsafe integers).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from eval_runner.contracts.execution import EXECUTION_SCHEMA
from eval_runner.contracts.hosted import HOSTED_SCHEMA, REPORT_SCHEMA, build_execute_body
from eval_runner.contracts.strict_json import JsonValue, canonical
from tests.support.trainer_side import asking_case, catalog_tool, chat_tool, draft, example_case, run_input

PLACEHOLDER = "req-fuzz"
HEX = "0123456789abcdef"
RELEASE_KIND = 3184


@dataclass(frozen=True, slots=True)
class Edit:
    name: str
    change: Callable[[dict[str, Any]], None] = field(compare=False)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Addressing:
    """What a request names: the runner, a catalog tool's definition, and the time it is made."""

    runner: str
    definition: dict[str, JsonValue]
    now: int

    @property
    def deadline(self) -> int:
        return self.now + 3_600


# -- the event ----------------------------------------------------------------------------------------


def flip_hex(text: str, at: int) -> str:
    if not text:
        return "0"
    index = at % len(text)
    found = text[index]
    other = HEX[(HEX.index(found) + 1) % 16] if found in HEX else "0"
    return text[:index] + other + text[index + 1 :]


def _set(name: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(fields: dict[str, Any]) -> None:
        fields[name] = value

    return change


def _hex_edit(name: str, how: str, at: int, noise: bytes, runner: str) -> Edit:
    length = 128 if name == "sig" else 64

    def change(fields: dict[str, Any]) -> None:
        old: str = fields[name]
        if how == "flip":
            fields[name] = flip_hex(old, at)
        elif how == "random":
            fields[name] = (noise * 4).hex()[:length]
        elif how == "upper":
            fields[name] = old.upper()
        elif how == "runner":
            fields[name] = (runner * 2)[:length]
        else:
            fields[name] = {"junk": "xyz", "empty": ""}[how]

    return Edit(f"{name} {how} {at}", change)


def _shift_created_at(delta: int) -> Edit:
    def change(fields: dict[str, Any]) -> None:
        fields["created_at"] = max(0, fields["created_at"] + delta)

    return Edit(f"created_at{delta:+d}", change)


def _payload(content: str) -> bytearray:
    """The content's bytes as base64 reads them (a content already spoiled past base64: its text's bytes)."""
    try:
        raw = base64.b64decode(content, validate=True)
    except ValueError:
        raw = content.encode("utf-8")
    return bytearray(raw or b"\x00")


def _content_edit(how: str, at: int, noise: bytes, text: str) -> Edit:
    def change(fields: dict[str, Any]) -> None:
        old: str = fields["content"]
        raw = _payload(old)
        if how == "flip":
            raw[at % len(raw)] ^= 1 << (at % 8)
            fields["content"] = base64.b64encode(bytes(raw)).decode()
        elif how == "version":
            raw[0] = at % 256
            fields["content"] = base64.b64encode(bytes(raw)).decode()
        elif how == "truncate":
            fields["content"] = old[: at % (len(old) + 1)]
        elif how == "noise":
            fields["content"] = base64.b64encode(noise).decode()
        elif how == "text":
            fields["content"] = text
        elif how == "future":
            fields["content"] = "#" + old[1:]
        else:
            fields["content"] = old + "="

    return Edit(f"content {how} {at}", change)


def _p_value(tags: list[list[str]], value: str) -> None:
    for tag in tags:
        if tag[:1] == ["p"]:
            tag[1:2] = [value]


def _tags_edit(how: str, runner: str, other: str, delta: int, extra: list[str]) -> Edit:
    def change(fields: dict[str, Any]) -> None:
        tags: list[list[str]] = fields["tags"]
        expiration = next((tag[1] for tag in tags if tag[:1] == ["expiration"] and len(tag) > 1), "0")
        shifted = str(int(expiration) + delta) if expiration.isdigit() else "1"
        if how == "p other":
            _p_value(tags, other)
        elif how == "p upper":
            _p_value(tags, runner.upper())
        elif how == "p short":
            _p_value(tags, runner[:-1])
        elif how == "p empty":
            _p_value(tags, "")
        elif how == "p again":
            tags.append(["p", runner])
        elif how == "p also other":
            tags.append(["p", other])
        elif how == "p dropped":
            tags[:] = [tag for tag in tags if tag[:1] != ["p"]]
        elif how == "p relay hint":
            _p_value(tags, runner)
            for tag in tags:
                if tag[:1] == ["p"]:
                    tag.append("wss://relay.example")
        elif how == "p bare":
            tags[:] = [["p"] if tag[:1] == ["p"] else tag for tag in tags]
        elif how == "expiration shifted":
            tags[:] = [["expiration", shifted] if tag[:1] == ["expiration"] else tag for tag in tags]
        elif how == "expiration text":
            tags[:] = [["expiration", "".join(extra) or "soon"] if tag[:1] == ["expiration"] else tag for tag in tags]
        elif how == "expiration dropped":
            tags[:] = [tag for tag in tags if tag[:1] != ["expiration"]]
        elif how == "expiration again":
            tags.append(["expiration", shifted])
        elif how == "expiration before":
            tags.insert(0, ["expiration", shifted])
        elif how == "reversed":
            tags.reverse()
        else:
            tags.append(extra or ["t"])

    return Edit(f"tags {how} {delta:+d} {extra}", change)


TAG_EDITS = (
    "p other",
    "p upper",
    "p short",
    "p empty",
    "p again",
    "p also other",
    "p dropped",
    "p relay hint",
    "p bare",
    "expiration shifted",
    "expiration text",
    "expiration dropped",
    "expiration again",
    "expiration before",
    "reversed",
    "extra",
)
SIGNING = ("none", "rehash", "trainer", "trainer", "stranger")
BASES = ("admissible", "too_large", "publish", "exec")
SHORT_TEXT = st.text(max_size=8)


def event_edits(runner: str) -> st.SearchStrategy[Edit]:
    """One edit to a request event's fields."""
    kinds = st.sampled_from([25_919, 25_921, 26_920, 27_020, 5_920, 1, 0, 65_535]) | st.integers(0, 65_535)
    deltas = st.sampled_from([-601, -600, -599, -1, 1, 299, 300, 301, -3_601, 3_600]) | st.integers(-(10**6), 10**6)
    noise = st.binary(min_size=1, max_size=80)
    tag_extra = st.lists(SHORT_TEXT, max_size=3) | st.sampled_from([["e", "0" * 64], ["t", "x"], ["expiration"]])
    return st.one_of(
        kinds.map(lambda kind: Edit(f"kind={kind}", _set("kind", kind))),
        st.builds(
            _hex_edit,
            st.sampled_from(["id", "pubkey", "sig"]),
            st.sampled_from(["flip", "random", "upper", "junk", "empty", "runner"]),
            st.integers(0, 127),
            st.binary(min_size=32, max_size=32),
            st.just(runner),
        ),
        deltas.map(_shift_created_at),
        st.builds(
            _content_edit,
            st.sampled_from(["flip", "version", "truncate", "noise", "text", "future", "pad"]),
            st.integers(0, 10_000),
            noise,
            st.text(max_size=40),
        ),
        st.builds(
            _tags_edit,
            st.sampled_from(TAG_EDITS),
            st.just(runner),
            st.binary(min_size=32, max_size=32).map(bytes.hex),
            st.integers(-5, 5) | st.sampled_from([3_600, -3_600]),
            tag_extra,
        ),
    )


@dataclass(frozen=True, slots=True)
class EventSpoiling:
    """Which request to make, what to do to its event, and how (or whether) to sign it again."""

    base: str
    edits: tuple[Edit, ...]
    signing: str


def event_spoilings(runner: str) -> st.SearchStrategy[EventSpoiling]:
    return st.builds(
        EventSpoiling,
        st.sampled_from(BASES),
        st.lists(event_edits(runner), max_size=3).map(tuple),
        st.sampled_from(SIGNING),
    )


def base_input(kind: str, at: Addressing) -> JsonValue:
    """A hosted input the runner admits (`admissible`, `chat`, `three runs`) or refuses at once."""
    found = at.definition
    if kind == "publish":
        report = {"digest": "sha256:" + "ab" * 32, "size": 10, "media_type": "application/json"}
        return {"v": HOSTED_SCHEMA, "action": "publish", "report": {**report, "schema": REPORT_SCHEMA}}
    if kind == "chat":
        return run_input("draft", draft(chat_tool([str(found["id"])])))
    cases = [example_case("greeting"), asking_case("shell", ["read", "exec"])] if kind == "exec" else None
    value = run_input(found, draft(catalog_tool(found), cases), runs=3 if kind == "three runs" else 1)
    if kind == "too_large":
        value["runs"] = 4
    return value


def base_body(kind: str, at: Addressing, request: str = PLACEHOLDER) -> dict[str, JsonValue]:
    """The execute body a phone would send for `base_input(kind)`, checked only where the builder checks."""
    body = build_execute_body(at.runner, request, base_input("admissible", at), at.now).to_json()
    body["input"] = copy.deepcopy(base_input(kind, at))
    return body


# -- the body -----------------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
KEYS = TEXT | st.sampled_from(
    ["v", "type", "meta", "parent", "draft", "token", "API_Key", "runs", "check", "validates", "id", "uses"]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats()
    | TEXT
    | st.sampled_from(["draft", "execute", "status", "run", "publish", "0" * 64, EXECUTION_SCHEMA, HOSTED_SCHEMA])
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8
)
#: Sizes of a huge string in bytes: within every bound, past the draft's 64 KiB, past the input's 128 KiB.
HUGE = st.sampled_from([4_000, 16_385, 40_000, 66_000, 131_100, 200_000])

Path = tuple[str | int, ...]


def _at(root: JsonValue, path: Path) -> JsonValue:
    for step in path:
        root = root[step]
    return root


def _places(root: JsonValue, path: Path = ()) -> list[Path]:
    """Every value's path in the tree, the root's children first."""
    found: list[Path] = []
    items: list[tuple[str | int, JsonValue]] = []
    if isinstance(root, dict):
        items = list(root.items())
    elif isinstance(root, list):
        items = list(enumerate(root))
    for key, value in items:
        found.append((*path, key))
        found.extend(_places(value, (*path, key)))
    return found


def _containers(root: JsonValue, path: Path = ()) -> list[Path]:
    return [path] + [place for place in _places(root, path) if isinstance(_at(root, place), dict | list)]


def _retyped(value: JsonValue) -> JsonValue:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {str(index): item for index, item in enumerate(value)}
    if isinstance(value, dict):
        return list(value.values())
    return "null"


def _name(path: Path) -> str:
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".") or "(body)"


@st.composite
def generic_edit(draw: st.DrawFn, body: dict[str, JsonValue]) -> Edit:
    """Drop, replace, retype, enlarge or add one value somewhere in `body` (as it stands)."""
    how = draw(st.sampled_from(["drop", "replace", "retype", "huge", "add", "repeat"]))
    if how in ("add", "repeat"):
        containers = _containers(body)
        path = containers[draw(st.integers(0, len(containers) - 1))]
        key, value = draw(KEYS), draw(JSON)

        def add(found: dict[str, Any]) -> None:
            holder = _at(found, path)
            if isinstance(holder, dict):
                holder[key] = copy.deepcopy(next(iter(holder.values()), value)) if how == "repeat" else value
            elif how == "repeat" and holder:
                holder.append(copy.deepcopy(holder[-1]))
            else:
                holder.append(value)

        return Edit(f"{how} {key!r} = {value!r} in {_name(path)}", add)
    places = _places(body)
    path = places[draw(st.integers(0, len(places) - 1))]
    value = draw(JSON) if how == "replace" else None
    size = draw(HUGE) if how == "huge" else 0
    letter = draw(st.sampled_from(["x", "é", "\n"])) if how == "huge" else ""

    def change(found: dict[str, Any]) -> None:
        holder = _at(found, path[:-1])
        if how == "drop":
            del holder[path[-1]]
        elif how == "replace":
            holder[path[-1]] = value
        elif how == "retype":
            holder[path[-1]] = _retyped(holder[path[-1]])
        else:
            holder[path[-1]] = letter * (size // len(letter.encode()))

    shown = f"{value!r}" if how == "replace" else f"{letter!r} for {size} bytes" if how == "huge" else ""
    return Edit(f"{how} {_name(path)} {shown}".rstrip(), change)


def _holder(root: JsonValue, path: Path) -> JsonValue | None:
    """The value at `path`, or None when an earlier edit took the way there away."""
    for step in path:
        held = (isinstance(root, dict) and isinstance(step, str) and step in root) or (
            isinstance(root, list) and isinstance(step, int) and -len(root) <= step < len(root)
        )
        if not held:
            return None
        root = root[step]
    return root


def _put(name: str, *changes: tuple[Path, JsonValue]) -> Edit:
    """Set each path (whose holder is still an object) to a fresh copy of its value."""

    def change(body: dict[str, Any]) -> None:
        for path, value in changes:
            holder = _holder(body, path[:-1])
            if isinstance(holder, dict):
                holder[str(path[-1])] = copy.deepcopy(value)

    return Edit(name, change)


def _on_list(name: str, path: Path, change: Callable[[list[Any]], None]) -> Edit:
    """Change the non-empty list at `path`, if it is still there."""

    def on_list(body: dict[str, Any]) -> None:
        found = _holder(body, path)
        if isinstance(found, list) and found:
            change(found)

    return Edit(name, on_list)


INPUT: Path = ("input",)
CASES: Path = ("input", "draft", "cases")
TOOL: Path = ("input", "draft", "tool")


def targeted_edits(at: Addressing) -> list[Edit]:
    """One edit per rule of the hosted input, the draft and the execute body the runner enforces."""
    other = "sha256:" + "cd" * 32
    nine = [example_case("greeting") | {"id": f"hello-{n}"} for n in range(9)]
    grader = '+++\ntype = "oracle"\ntarget = "last_message"\n+++\n\nfiles\n'
    exec_case, web_case = asking_case("shell", ["read", "exec"]), asking_case("web", ["network"])
    prompts = {
        "no frontmatter": "Say hello.\n",
        "broken frontmatter": '+++\nv = "openagents.eval-case.v1\n+++\n\nHello.\n',
        "blank prompt": "   \n",
        "bad env": '+++\nv = "openagents.eval-case.v1"\n[run]\nenv = {PATH = "/"}\n+++\n\nHi.\n',
    }
    return [
        *(_put(f"runs={runs!r}", ((*INPUT, "runs"), runs)) for runs in (0, 2, 3, 4, -1, "1", 1.5, True, None, 2**53)),
        *(_put(f"baseline={value!r}", ((*INPUT, "baseline"), value)) for value in (False, None, "true")),
        _put("action=publish", ((*INPUT, "action"), "publish")),
        _put("action=delete", ((*INPUT, "action"), "delete")),
        _put("input v2", ((*INPUT, "v"), HOSTED_SCHEMA.replace("v1", "v2"))),
        _put("suite=release", ((*INPUT, "suite"), {"id": "5c" * 32, "pubkey": at.runner, "kind": RELEASE_KIND})),
        _put("suite=kind 1", ((*INPUT, "suite"), {"id": "5c" * 32, "pubkey": at.runner, "kind": 1})),
        _put("check=hex", ((*INPUT, "check"), "ab" * 32)),
        _put("check=word", ((*INPUT, "check"), "recheck")),
        _put("validates=hex", ((*INPUT, "validates"), "ab" * 32)),
        _put("validates=null", ((*INPUT, "validates"), None)),
        _put("draft=null", ((*INPUT, "draft"), None)),
        _put("subject=draft", ((*INPUT, "subject"), "draft")),
        _put("subject=other digest", ((*INPUT, "subject", "artifact", "digest"), other)),
        _put("no cases", (CASES, [])),
        _put("nine cases", (CASES, nine)),
        _on_list("same id twice", CASES, lambda cases: cases.append(copy.deepcopy(cases[0]))),
        _on_list("asks exec", CASES, lambda cases: cases.append(copy.deepcopy(exec_case))),
        _on_list("asks network", CASES, lambda cases: cases.append(copy.deepcopy(web_case))),
        *(_put(name, ((*CASES, 0, "prompt"), text)) for name, text in prompts.items()),
        _put("kind mismatch", ((*CASES, 0, "kind"), "should-fire")),
        _on_list("graders unordered", (*CASES, -1, "graders"), lambda graders: graders.reverse()),
        _put("grader of no type", ((*CASES, 0, "graders"), [{"name": "odd", "text": grader}])),
        _put("tool catalog and skill", ((*TOOL, "skill"), "Name the main language.")),
        _put("tool without skill", ((*TOOL, "catalog"), None), ((*TOOL, "skill"), None)),
        _put(
            "tool uses a stranger",
            ((*TOOL, "catalog"), None),
            ((*TOOL, "skill"), "Be brief."),
            ((*TOOL, "uses"), ["ee" * 32 + ":other/tool"]),
        ),
        _put("tool name blank", ((*TOOL, "name"), "  ")),
        _put("tool name 81", ((*TOOL, "name"), "n" * 81)),
        _put("tool summary 401", ((*TOOL, "summary"), "s" * 401)),
        _put("tool skill 16 KiB + 1", ((*TOOL, "catalog"), None), ((*TOOL, "skill"), "k" * 16_385)),
        _put("target=other runner", (("target", "id"), "ee" * 32 + ":ext-eval/run")),
        _put("target digest", (("target", "artifact", "digest"), other)),
        _put("requirements digest", (("requirements", "digest"), other)),
        _put("lock digest", (("lock", "digest"), other)),
        _put("context digest", (("context", "digest"), other)),
        _put("deadline passed", (("deadline",), at.now - 1)),
        _put("deadline now", (("deadline",), at.now)),
        _put("kept too long", (("retain_until",), at.deadline + 10**7)),
        _put("kept until deadline", (("retain_until",), at.deadline)),
        *(_put(f"attempt={attempt}", (("attempt",), attempt)) for attempt in (2, 0, 2**32)),
        *(_put(f"request={request!r}", (("request",), request)) for request in ("", "r" * 129, "req fuzz")),
        _put("run differs", (("run",), "another-run")),
        _put("requires x", (("requires",), ["x"])),
        _put("token key", (("Token",), "t")),
        _put("unknown key", (("priority",), 1)),
        _put("meta", (("meta",), {"note": "hi"})),
        _put("meta []", (("meta",), [])),
        _put("parent", (("parent",), {"run": "r", "step": "s", "iteration": 0, "attempt": 1})),
        _put("bounds extra", (("bounds", "gpus"), 1)),
        _put("bounds negative", (("bounds", "wall_ms"), -1)),
        _put("type status", (("type",), "status")),
        _put("v other", (("v",), "openagents.execution.v2")),
    ]


@dataclass(frozen=True, slots=True)
class BodySpoiling:
    """A spoiled execute body, how it is written, and the `expiration` tag the event carries."""

    body: JsonValue = field(repr=False)
    edits: tuple[Edit, ...]
    writing: str
    expiration: str

    def text(self) -> str:
        return written(self.body, self.writing)

    def __repr__(self) -> str:
        return f"BodySpoiling({list(self.edits)}, {self.writing}, expiration={self.expiration})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def written(body: JsonValue, writing: str = "canonical") -> str:
    """The plaintext a hand-made client would seal: what JCS can't write goes out ASCII-escaped as written
    (non-finite numbers, unsafe integers, lone surrogates), for the runner to drop."""
    if writing == "spaced":
        try:
            spaced = json.dumps(body, ensure_ascii=False, allow_nan=False)
            spaced.encode("utf-8")
        except (ValueError, TypeError):
            pass
        else:
            return spaced
    try:
        return canonical(body).decode("utf-8")
    except Exception:
        return json.dumps(body)


BODY_KINDS = ("admissible", "admissible", "chat", "three runs", "publish", "exec")


def body_spoilings(at: Addressing) -> st.SearchStrategy[BodySpoiling]:
    """A base execute body (the admitted kinds more often), 0–2 targeted and 0–2 generic edits, at least one."""
    return _body_spoilings(at, targeted_edits(at), {kind: base_body(kind, at) for kind in BODY_KINDS})


@st.composite
def _body_spoilings(
    draw: st.DrawFn, at: Addressing, targeted: list[Edit], bases: dict[str, dict[str, JsonValue]]
) -> BodySpoiling:
    kind = draw(st.sampled_from(BODY_KINDS))
    body = copy.deepcopy(bases[kind])
    edits: list[Edit] = draw(st.lists(st.sampled_from(targeted), max_size=2))
    for edit in edits:
        edit.change(body)
    for _ in range(draw(st.integers(0 if edits else 1, 2))):
        edit = draw(generic_edit(body))
        edit.change(body)
        edits.append(edit)
    deadline = body.get("deadline")
    follows = draw(st.booleans() | st.just(True))
    expiration = str(deadline) if follows and type(deadline) is int else str(at.deadline)
    writing = draw(st.sampled_from(["canonical", "spaced"]))
    return BodySpoiling(body, (Edit(f"base {kind}", _unchanged), *edits), writing, expiration)


def _unchanged(_: dict[str, Any]) -> None:
    pass


# -- controls -----------------------------------------------------------------------------------------

#: Which execute event a control's `e` tag names: the trainer's own, another trainer's, none at all, …
CONTROL_TARGETS = ("own", "own", "other", "random", "none", "two", "upper")


@dataclass(frozen=True, slots=True)
class ControlSpoiling:
    """A control body for `request` (before its edits), and which execute event its `e` tag names."""

    request: str
    body: JsonValue = field(repr=False)
    edits: tuple[Edit, ...]
    target: str

    def __repr__(self) -> str:
        return f"ControlSpoiling({self.request}, {list(self.edits)}, target={self.target})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@st.composite
def control_spoilings(draw: st.DrawFn, requests: list[str]) -> ControlSpoiling:
    """A status, replay or cancel for one of `requests`, with 0–2 generic edits and an `e` tag choice."""
    kind = draw(st.sampled_from(["status", "replay", "cancel"]))
    request = draw(st.sampled_from(requests))
    body: dict[str, JsonValue] = {
        "v": EXECUTION_SCHEMA,
        "requires": [],
        "type": kind,
        "request": request,
        "attempt": 1,
        "run": request,
    }
    if kind == "replay":
        body["after_seq"] = draw(st.none() | st.integers(0, 12))
        body["max_records"] = draw(st.integers(1, 256))
    if kind == "cancel":
        body["reason"] = draw(st.text(min_size=1, max_size=20))
    edits: list[Edit] = []
    for _ in range(draw(st.integers(0, 2))):
        edit = draw(generic_edit(body))
        edit.change(body)
        edits.append(edit)
    return ControlSpoiling(request, body, tuple(edits), draw(st.sampled_from(CONTROL_TARGETS)))
