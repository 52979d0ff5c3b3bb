"""Microsoft Vally's eval spec, `eval.yaml`, read as our cases.

    config: {runs: 3, timeout: 2m}
    stimuli:
      - name: basic-test-generation
        prompt: Write unit tests for add() and save them to add.test.js.
        graders:
          - {type: file-exists, config: {path: add.test.js}}
          - {type: output-contains, config: {substring: test}}
        constraints: {max_turns: 10}

Each stimulus is one should-fire case (a `tags.kind` of `should-not-fire`, a `tags.should_trigger` of
false, or a `skill-invocation` grader that disallows this skill makes it should-not-fire). Graders map
onto ours: `output-(not-)contains` and `file-(not-)contains` become `regex` over the literal text,
`output-(not-)matches` and `file-(not-)matches` `regex` over the pattern, `file-(not-)exists`
`file_exists`, `skill-invocation` `operation_used` on `skill:<name>`, `prompt` a `judge` over the
stimulus's rubric, `completed` and `exit-success` a non-empty last message. `environment.files` are
fixtures; setup commands and multi-turn stimuli are refused; `max_duration` (or `config.timeout`) is the
deadline, and `max_turns` / `max_tokens` are said not to be enforced. The mapping: decisions.md
("Test sets in the agents' own formats").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eval_runner.engine.testset.cases import MAX_DEADLINE_SECONDS, RUNS_RANGE, CaseFile, CaseKind
from eval_runner.engine.testset.foreign import (
    ForeignCase,
    ForeignGrader,
    FormatCode,
    FormatError,
    GraderKeys,
    case_name,
    fixture,
    literal_pattern,
    load_yaml,
    safe_relative,
    utf8_text,
)

EVAL_FILES = ("eval.yaml", "eval.yml")
MAX_STIMULI = 256
MAX_GRADERS = 64
TOP_KEYS = (
    "name",
    "description",
    "version",
    "type",
    "environment",
    "agent_environment",
    "config",
    "defaults",
    "stimuli",
    "scoring",
)
CONFIG_KEYS = ("runs", "timeout", "model", "judge_model", "executor", "judge_reasoning_effort")
ENVIRONMENT_KEYS = ("skills", "files", "commands", "commandTimeout", "git")
STIMULUS_KEYS = (
    "name",
    "description",
    "prompt",
    "graders",
    "constraints",
    "environment",
    "agent_environment",
    "tags",
    "rubric",
    "turns",
)
CONSTRAINT_KEYS = ("max_turns", "max_tokens", "max_duration")
GRADER_KEYS = ("type", "name", "config", "weight")
#: Vally grader type → the config keys this runner reads of it.
GRADER_CONFIG: dict[str, tuple[str, ...]] = {
    "output-contains": ("substring",),
    "output-not-contains": ("substring",),
    "output-matches": ("pattern",),
    "output-not-matches": ("pattern",),
    "file-exists": ("path",),
    "file-not-exists": ("path",),
    "file-contains": ("path", "substring"),
    "file-not-contains": ("path", "substring"),
    "file-matches": ("path", "pattern"),
    "file-not-matches": ("path", "pattern"),
    "skill-invocation": ("required", "disallowed"),
    "prompt": ("prompt", "rubric", "model", "threshold", "scoring", "evidence", "reasoning_effort"),
    "completed": (),
    "exit-success": (),
}
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_NON_EMPTY = r"\S"
#: Reads an input file relative to the eval spec's directory: its bytes, or None when absent.
FileReader = Callable[[str, str, str], bytes | None]


@dataclass(frozen=True, slots=True)
class VallyTestSet:
    """The cases of an eval spec and what a person should know about how they were read."""

    cases: tuple[ForeignCase, ...]
    notices: tuple[str, ...]


class _Spec:
    """One eval spec being read: the file, the skill under test, the reader and the notices so far."""

    def __init__(self, file: str, skill_name: str | None, read: FileReader) -> None:
        self.file, self.skill_name, self.read = file, skill_name, read
        self.notices: list[str] = []

    def fail(self, code: FormatCode, key: str | None, message: str) -> FormatError:
        return FormatError(code, self.file, key, message)

    def table(self, value: Any, key: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(FormatCode.MALFORMED, key or None, f"`{key}` must be a mapping")
        for name in sorted(value, key=str):
            if not isinstance(name, str) or name not in allowed:
                at = f"{key}.{name}" if key else str(name)
                raise self.fail(
                    FormatCode.UNKNOWN_KEY, at, f"unknown key `{at}`; the keys read are {', '.join(allowed)}"
                )
        return value

    def text(self, value: Any, key: str, *, required: bool = True) -> str | None:
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            code = FormatCode.MISSING if value is None else FormatCode.MALFORMED
            raise self.fail(code, key, f"`{key}` must be a non-empty string")
        return value

    def note(self, line: str) -> None:
        if line not in self.notices:
            self.notices.append(line)


def parse_eval_yaml(data: bytes, read: FileReader, skill_name: str | None, file: str = "eval.yaml") -> VallyTestSet:
    """The cases of an `eval.yaml`; `read(src, file, key)` gives a staged file's bytes relative to the spec."""
    spec = _Spec(file, skill_name, read)
    found = load_yaml(utf8_text(data, file), file)
    top = spec.table(found if found is not None else {}, "", TOP_KEYS)
    if "config" in top and "defaults" in top:
        raise spec.fail(FormatCode.MALFORMED, "defaults", "`defaults` and `config` are the same block; give one")
    config = spec.table(top.get("defaults", top.get("config")), "config", CONFIG_KEYS)
    runs = _runs(spec, config.get("runs"))
    deadline = _duration(spec, config.get("timeout"), "config.timeout")
    if any(key in config for key in ("model", "judge_model", "executor")):
        spec.note("eval.yaml: config.model, judge_model and executor are not read; the runner names the agent and door")
    root_files = _environment(spec, top.get("environment", top.get("agent_environment")), "environment")
    weights = _weights(spec, top.get("scoring"))
    stimuli = top.get("stimuli")
    if stimuli is None:
        raise spec.fail(FormatCode.MISSING, "stimuli", "an eval spec needs `stimuli`, its test cases")
    if not isinstance(stimuli, list) or not stimuli:
        raise spec.fail(FormatCode.MALFORMED, "stimuli", "`stimuli` must be a non-empty list")
    if len(stimuli) > MAX_STIMULI:
        raise spec.fail(FormatCode.TOO_LARGE, "stimuli", f"`stimuli` holds at most {MAX_STIMULI}")
    taken: set[str] = set()
    cases = tuple(
        _stimulus(spec, entry, f"stimuli[{index}]", taken, root_files, runs, deadline, weights)
        for index, entry in enumerate(stimuli)
    )
    return VallyTestSet(cases, tuple(spec.notices))


def _runs(spec: _Spec, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise spec.fail(FormatCode.MALFORMED, "config.runs", "`config.runs` must be a whole number")
    if value == 0:
        raise spec.fail(FormatCode.UNSUPPORTED, "config.runs", "`runs: 0` only lints the spec; there is nothing to run")
    if not RUNS_RANGE[0] <= value <= RUNS_RANGE[1]:
        raise spec.fail(
            FormatCode.TOO_LARGE, "config.runs", f"`config.runs` is from {RUNS_RANGE[0]} to {RUNS_RANGE[1]}"
        )
    return value


def _duration(spec: _Spec, value: Any, key: str) -> int | None:
    """Seconds, rounded up, from `2m`, `300s`, `30000ms`, `1h` or a bare number of seconds."""
    if value is None:
        return None
    seconds: float
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (matched := _DURATION.fullmatch(value.strip())):
        seconds = float(matched.group(1)) * _UNIT_SECONDS[matched.group(2)]
    else:
        raise spec.fail(FormatCode.MALFORMED, key, f"`{key}` must be a duration such as 2m, 300s or 30000ms")
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_DEADLINE_SECONDS:
        raise spec.fail(FormatCode.TOO_LARGE, key, f"`{key}` must be more than 0 and at most {MAX_DEADLINE_SECONDS}s")
    return max(1, math.ceil(seconds))


def _environment(spec: _Spec, value: Any, key: str) -> tuple[CaseFile, ...]:
    environment = spec.table(value, key, ENVIRONMENT_KEYS)
    if environment.get("commands"):
        raise spec.fail(FormatCode.UNSUPPORTED, f"{key}.commands", "setup commands are not run; stage files instead")
    if environment.get("git"):
        raise spec.fail(FormatCode.UNSUPPORTED, f"{key}.git", "a git workspace is not set up; stage files instead")
    if environment.get("skills"):
        spec.note(f"eval.yaml: {key}.skills is not read; the with arm gets this extension's skill and nothing else")
    files = environment.get("files")
    if files is None:
        return ()
    if not isinstance(files, list):
        raise spec.fail(FormatCode.MALFORMED, f"{key}.files", "`files` must be a list of {src, dest}")
    out = []
    for number, item in enumerate(files):
        at = f"{key}.files[{number}]"
        entry = spec.table(item, at, ("src", "dest"))
        src = spec.text(entry.get("src"), f"{at}.src")
        dest = spec.text(entry.get("dest"), f"{at}.dest")
        assert src is not None
        assert dest is not None
        data = spec.read(src, spec.file, f"{at}.src")
        if data is None:
            raise spec.fail(FormatCode.MISSING, f"{at}.src", f"`{src}` is not beside the eval spec")
        out.append(fixture(dest.removeprefix("./"), data, spec.file, f"{at}.dest"))
    return tuple(out)


def _weights(spec: _Spec, value: Any) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise spec.fail(FormatCode.MALFORMED, "scoring", "`scoring` must be a mapping")
    weights = value.get("weights") or {}
    if not isinstance(weights, dict):
        raise spec.fail(FormatCode.MALFORMED, "scoring.weights", "`scoring.weights` maps grader types to numbers")
    out = {}
    for name, weight in weights.items():
        if not isinstance(weight, int | float) or isinstance(weight, bool) or not math.isfinite(weight) or weight < 0:
            raise spec.fail(FormatCode.MALFORMED, f"scoring.weights.{name}", "a weight is a number, 0 or more")
        out[str(name)] = float(weight)
    if "threshold" in value:
        spec.note("eval.yaml: scoring.threshold is not read; the verdict is the runner's gate over both arms")
    return out


def _kind(spec: _Spec, tags: Any, graders: list[Any], at: str) -> tuple[CaseKind, tuple[str, ...]]:
    words: tuple[str, ...] = ()
    kind = CaseKind.SHOULD_FIRE
    if isinstance(tags, dict):
        if str(tags.get("kind", "")).lower() == CaseKind.SHOULD_NOT_FIRE.value:
            kind = CaseKind.SHOULD_NOT_FIRE
        if tags.get("should_trigger") in (False, "false"):
            kind = CaseKind.SHOULD_NOT_FIRE
    elif isinstance(tags, list):
        if not all(isinstance(tag, str) and tag.strip() for tag in tags):
            raise spec.fail(FormatCode.MALFORMED, f"{at}.tags", "`tags` holds non-empty strings")
        words = tuple(tags)
    elif tags is not None:
        raise spec.fail(FormatCode.MALFORMED, f"{at}.tags", "`tags` is a mapping or a list of strings")
    for grader in graders:
        if isinstance(grader, dict) and grader.get("type") == "skill-invocation":
            config = grader.get("config")
            disallowed = config.get("disallowed") if isinstance(config, dict) else None
            if spec.skill_name is not None and isinstance(disallowed, list) and spec.skill_name in disallowed:
                kind = CaseKind.SHOULD_NOT_FIRE
    return kind, words


def _stimulus(
    spec: _Spec,
    entry: Any,
    at: str,
    taken: set[str],
    root_files: tuple[CaseFile, ...],
    runs: int | None,
    deadline: int | None,
    weights: dict[str, float],
) -> ForeignCase:
    stimulus = spec.table(entry, at, STIMULUS_KEYS)
    if "turns" in stimulus:
        raise spec.fail(FormatCode.UNSUPPORTED, f"{at}.turns", "multi-turn stimuli are not run; a case is one prompt")
    name = spec.text(stimulus.get("name"), f"{at}.name", required=False) or f"stimulus-{at[8:-1]}"
    prompt = spec.text(stimulus.get("prompt"), f"{at}.prompt")
    assert prompt is not None
    description = spec.text(stimulus.get("description"), f"{at}.description", required=False)
    constraints = spec.table(stimulus.get("constraints"), f"{at}.constraints", CONSTRAINT_KEYS)
    for key in ("max_turns", "max_tokens"):
        bound = constraints.get(key)
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
            raise spec.fail(FormatCode.MALFORMED, f"{at}.constraints.{key}", f"`{key}` must be a whole number")
        if bound is not None:
            spec.note(f"eval.yaml: constraints.{key} is not enforced per case; the agent's own bounds apply")
    stimulus_deadline = _duration(spec, constraints.get("max_duration"), f"{at}.constraints.max_duration")
    files = {item.name: item for item in root_files}
    environment = stimulus.get("environment", stimulus.get("agent_environment"))
    files.update({item.name: item for item in _environment(spec, environment, f"{at}.environment")})
    entries = stimulus.get("graders")
    if not isinstance(entries, list) or not entries:
        raise spec.fail(FormatCode.MISSING, f"{at}.graders", "a stimulus needs `graders`, a non-empty list")
    if len(entries) > MAX_GRADERS:
        raise spec.fail(FormatCode.TOO_LARGE, f"{at}.graders", f"a stimulus has at most {MAX_GRADERS} graders")
    kind, tags = _kind(spec, stimulus.get("tags"), entries, at)
    rubric = _rubric(spec, stimulus.get("rubric"), f"{at}.rubric")
    names: set[str] = set()
    graders: list[ForeignGrader] = []
    for number, grader in enumerate(entries):
        graders.extend(_grader(spec, grader, f"{at}.graders[{number}]", names, rubric, weights))
    return ForeignCase(
        name=case_name(name, taken),
        prompt=prompt,
        origin=f"{spec.file}#{at}",
        kind=kind,
        description=" ".join((description or name).split())[:1024],
        runs=runs,
        deadline_seconds=stimulus_deadline or deadline,
        graders=tuple(graders),
        fixtures=tuple(files.values()),
        tags=tags,
    )


def _rubric(spec: _Spec, value: Any, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) and item.strip() for item in value):
        return "\n".join(f"- {item}" for item in value)
    raise spec.fail(FormatCode.MALFORMED, key, "`rubric` is a string or a list of strings")


def _grader(
    spec: _Spec, value: Any, at: str, names: set[str], rubric: str | None, weights: dict[str, float]
) -> list[ForeignGrader]:
    entry = spec.table(value, at, GRADER_KEYS)
    kind = entry.get("type")
    if kind not in GRADER_CONFIG:
        raise spec.fail(
            FormatCode.UNSUPPORTED,
            f"{at}.type",
            f"grader type {kind!r} is not read; the types read are {', '.join(GRADER_CONFIG)}",
        )
    config = spec.table(entry.get("config"), f"{at}.config", GRADER_CONFIG[kind])
    label = spec.text(entry.get("name"), f"{at}.name", required=False) or kind
    weight = entry.get("weight", weights.get(kind))
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0):
        if weight == 0 and not isinstance(weight, bool):
            return []  # a weight of 0 does not count
        raise spec.fail(FormatCode.MALFORMED, f"{at}.weight", "a grader's weight is a number above 0")

    def made(keys: GraderKeys, suffix: str = "") -> ForeignGrader:
        return ForeignGrader(case_name(f"{label}{suffix}", names), keys)

    def field(key: str) -> str:
        text = spec.text(config.get(key), f"{at}.config.{key}")
        assert text is not None
        return text

    negated = "-not-" in kind
    out: list[ForeignGrader] = []
    if kind in ("output-contains", "output-not-contains"):
        out.append(made(_regex(literal_pattern(field("substring")), "last_message", negated)))
    elif kind in ("output-matches", "output-not-matches"):
        out.append(made(_regex(field("pattern"), "last_message", negated)))
    elif kind in ("file-exists", "file-not-exists"):
        out.append(made({"type": "file_exists", "path": _path(spec, field("path"), at), "exists": not negated}))
    elif kind in ("file-contains", "file-not-contains", "file-matches", "file-not-matches"):
        target = {"file": _path(spec, field("path"), at)}
        pattern = literal_pattern(field("substring")) if "contains" in kind else field("pattern")
        out.append(made(_regex(pattern, target, negated)))
    elif kind == "skill-invocation":
        out.extend(_skill_invocation(spec, config, at, made))
    elif kind == "prompt":
        criteria = config.get("prompt") or config.get("rubric") or rubric
        if not isinstance(criteria, str) or not criteria.strip():
            raise spec.fail(FormatCode.MISSING, f"{at}.config.prompt", "a prompt grader needs a rubric to judge by")
        out.append(made({"type": "judge", "criteria": criteria}))
    else:  # completed, exit-success: the agent answered something
        out.append(made(_regex(_NON_EMPTY, "last_message", False)))
    if weight is not None and weight != 1:
        return [_weighted(grader, float(weight)) for grader in out]
    return out


def _weighted(grader: ForeignGrader, weight: float) -> ForeignGrader:
    return ForeignGrader(grader.name, {**grader.keys, "weight": weight})


def _regex(pattern: str, target: str | dict[str, str], negated: bool) -> GraderKeys:
    keys: GraderKeys = {"type": "regex", "pattern": pattern, "target": target}
    if negated:
        keys["match"] = "not_contains"
    return keys


def _path(spec: _Spec, path: str, at: str) -> str:
    cleaned = path.removeprefix("./")
    if safe_relative(cleaned) is None:
        raise spec.fail(FormatCode.OUTSIDE, f"{at}.config.path", f"`{path}` is not a relative path in the workspace")
    return cleaned


def _skill_invocation(
    spec: _Spec, config: dict[str, Any], at: str, made: Callable[..., ForeignGrader]
) -> list[ForeignGrader]:
    out = []
    bounds: tuple[tuple[str, GraderKeys], ...] = (
        ("required", {"min": 1}),
        ("disallowed", {"min": 0, "max": 0, "arm": "both"}),
    )
    for key, bound in bounds:
        names = config.get(key)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(name, str) and name.strip() for name in names):
            raise spec.fail(FormatCode.MALFORMED, f"{at}.config.{key}", f"`{key}` is a list of skill names")
        for name in names:
            keys: GraderKeys = {"type": "operation_used", "operation": f"skill:{name}"}
            keys.update(bound)
            out.append(made(keys, f"-{key}-{name}"))
    if not out:
        raise spec.fail(FormatCode.MISSING, f"{at}.config", "skill-invocation needs `required` or `disallowed`")
    return out
