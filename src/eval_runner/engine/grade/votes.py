"""The graders that ask a door: `decision` (Jev) and `judge` (the chat door), and the doors they ask.

A door is a model behind a network we do not control, so a door grader asks more than once and counts
votes (runner.md §13.6, §22 "Door graders"). A door that cannot answer raises `DoorError`; the grader
then fails with the reason and keeps the votes it had. An absent door fails the grader: nothing here
ever passes unasked. The doors are protocols so grading stays testable; the HTTP doors are
`engine/grade/doors.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, TypeAlias

from eval_runner.engine.grade.spec import (
    ChoiceQuestion,
    DecisionGrader,
    DecisionQuestion,
    JudgeGrader,
    NoulQuestion,
    ScoreQuestion,
)
from eval_runner.errors import EvalRunnerError

#: Calls a door grader makes at most, and the votes it needs (runner.md §22).
DOOR_CALLS = 3
VOTES_NEEDED = 2
JUDGE_SYSTEM = "You are a strict, terse evaluation judge for agent runs."
NO_DECISION_DOOR = "no decision door is configured"
NO_JUDGE_DOOR = "no judge door is configured"
#: How much of an unreadable judge answer a vote keeps.
UNREAD_ANSWER_CHARS = 80
#: A probability this far outside [0, 1] is float noise and is clamped; further out is refused.
PROBABILITY_SLACK = 1e-9

#: Unicode White_Space, the set Rust's `str::trim` strips (Python's `str.strip` also strips \x1c-\x1f).
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_QUOTES = "\"'*`"

JsonValue: TypeAlias = Any


class DoorError(EvalRunnerError):
    """A door gave no usable answer. The message is the reason a grader fails with; it never holds a key."""


@dataclass(frozen=True, slots=True)
class NoulAnswer:
    """P(yes)."""

    noul: float


@dataclass(frozen=True, slots=True)
class ScoreAnswer:
    """The probability-weighted level index, from 0 to the top level."""

    score: float


@dataclass(frozen=True, slots=True)
class ChoiceAnswer:
    """The option picked and each option's probability (empty when the door sent none)."""

    choice: str
    probabilities: tuple[tuple[str, float], ...] = ()


DecisionAnswer: TypeAlias = NoulAnswer | ScoreAnswer | ChoiceAnswer


class DecisionDoor(Protocol):
    """Jev, or anything that answers a typed question about a state. Raises only `DoorError`."""

    def describe(self) -> str:
        """The door's name for a report (no key)."""
        ...

    async def decide(
        self, state: Mapping[str, JsonValue], question: DecisionQuestion, rubric: str | None
    ) -> DecisionAnswer: ...


class JudgeDoor(Protocol):
    """A chat door that completes one system prompt and one user prompt. Raises only `DoorError`."""

    def describe(self) -> str:
        """The door's name for a report (no key)."""
        ...

    async def judge(self, system: str, user: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Doors:
    """The doors a grading pass may call; an absent door fails its graders. A stopped suite is graded
    with `Doors()` (runner.md §13.6)."""

    decision: DecisionDoor | None = None
    judge: JudgeDoor | None = None


NO_DOORS = Doors()


@dataclass(frozen=True, slots=True)
class Vote:
    """One door answer as a grades document records it: a probability (`0.750`), `PASS`, `FAIL`, or the
    start of an unreadable answer; `counted` says whether it counts toward a pass."""

    answer: str
    counted: bool

    def to_json(self) -> dict[str, JsonValue]:
        return {"answer": self.answer, "counted": self.counted}


@dataclass(frozen=True, slots=True)
class Checked:
    """What one grader found: pass or not, why in one line, and any door votes."""

    passed: bool
    explanation: str
    votes: tuple[Vote, ...] = ()


def failed(explanation: str) -> Checked:
    return Checked(False, explanation)


# ------------------------------------------------------------------------------------------------ judge


def judge_prompt(record: str, criteria: str) -> str:
    """The judge grader's user prompt (runner.md §13.6)."""
    return f'## Run record\n{record}\n\n## Criterion\n{criteria}\n\nAnswer only with "PASS" or "FAIL".'


def judge_answer(text: str) -> bool | None:
    """True for PASS, False for FAIL, None for anything else: white space trimmed, then quotes (`"`, `'`),
    `*` and backticks from both ends, then trailing `.`s, then white space; the word compared with ASCII
    case folding only (so `PAſS` is not PASS). This order is the reference's: `"PASS."` and `**PASS.**`
    read, `**PASS**.` does not. Never raises."""
    word = text.strip(_WHITE_SPACE).strip(_QUOTES).rstrip(".").strip(_WHITE_SPACE)
    if len(word) != 4 or not word.isascii():
        return None
    upper = word.upper()
    if upper == "PASS":
        return True
    if upper == "FAIL":
        return False
    return None


def bounded(text: str, limit: int = UNREAD_ANSWER_CHARS) -> str:
    """`text` trimmed, cut to `limit` characters with an ellipsis."""
    text = text.strip(_WHITE_SPACE)
    return text if len(text) <= limit else text[:limit] + "…"


async def grade_judge(grader: JudgeGrader, record: str, door: JudgeDoor | None) -> Checked:
    """Ask the judge door up to three times about `record` (the focus as text)."""
    if door is None:
        return failed(NO_JUDGE_DOOR)
    user = judge_prompt(record, grader.criteria)
    votes: list[Vote] = []
    passes = fails = 0
    for call in range(1, DOOR_CALLS + 1):
        try:
            text = await door.judge(JUDGE_SYSTEM, user)
        except DoorError as error:
            return Checked(False, f"the judge door failed on call {call}: {error}", tuple(votes))
        answer = judge_answer(text)
        if answer is True:
            passes += 1
            votes.append(Vote("PASS", True))
        elif answer is False:
            fails += 1
            votes.append(Vote("FAIL", False))
        else:
            votes.append(Vote(bounded(text), False))
        if fails > 0 or passes + (DOOR_CALLS - call) < VOTES_NEEDED:
            break
    return Checked(
        passes >= VOTES_NEEDED and fails == 0,
        f"{passes} PASS and {fails} FAIL of {len(votes)} answers; {VOTES_NEEDED} PASS and no FAIL needed",
        tuple(votes),
    )


def judge_record(value: JsonValue) -> str:
    """The run record a judge reads: a text focus as it is, a structured one as pretty JSON (sorted keys,
    as the reference's serde maps print)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# --------------------------------------------------------------------------------------------- decision


def probability(answer: DecisionAnswer, question: DecisionQuestion) -> float:
    """The number a decision grader compares with its threshold. Raises `DoorError` when the answer is of
    another type than the question, or is not a probability."""
    if isinstance(question, NoulQuestion) and isinstance(answer, NoulAnswer):
        value = answer.noul
    elif isinstance(question, ScoreQuestion) and isinstance(answer, ScoreAnswer):
        value = answer.score / (max(len(question.levels), 2) - 1)
    elif isinstance(question, ChoiceQuestion) and isinstance(answer, ChoiceAnswer):
        if not answer.probabilities:
            value = 1.0 if answer.choice in question.passing else 0.0
        else:
            value = 0.0
            for option, mass in answer.probabilities:
                if option in question.passing:
                    value += mass
    else:
        raise DoorError("the door answered a different question type than it was asked")
    if not (math.isfinite(value) and -PROBABILITY_SLACK <= value <= 1.0 + PROBABILITY_SLACK):
        raise DoorError(f"the door answered {value}, which is not a probability")
    return min(max(value, 0.0), 1.0)


def decision_state(task: str, focus: str, run: JsonValue) -> dict[str, JsonValue]:
    """The state a decision grader asks about (runner.md §13.6)."""
    return {"task": task, "focus": focus, "run": run}


async def grade_decision(grader: DecisionGrader, state: Mapping[str, JsonValue], door: DecisionDoor | None) -> Checked:
    """Ask the decision door up to three times about `state`."""
    if door is None:
        return failed(NO_DECISION_DOOR)
    votes: list[Vote] = []
    counted = not_counted = 0
    for call in range(1, DOOR_CALLS + 1):
        try:
            answer = await door.decide(state, grader.question, grader.rubric)
            value = probability(answer, grader.question)
        except DoorError as error:
            return Checked(False, f"the decision door failed on call {call}: {error}", tuple(votes))
        vote = value >= grader.threshold
        if vote:
            counted += 1
        else:
            not_counted += 1
        votes.append(Vote(f"{value:.3f}", vote))
        if counted >= VOTES_NEEDED or not_counted > DOOR_CALLS - VOTES_NEEDED:
            break
    return Checked(
        counted >= VOTES_NEEDED,
        f"{counted} of {len(votes)} answers at or above {plain_number(grader.threshold)}; {VOTES_NEEDED} needed",
        tuple(votes),
    )


def plain_number(value: float) -> str:
    """A float as Rust's `Display` prints it: shortest round trip, no exponent, `1` for 1.0."""
    if value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")
