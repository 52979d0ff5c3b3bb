"""Door graders (runner.md §13.6, §2.2, §21.7): decision votes against a stand-in Jev door on loopback, its
failover across doors, judge votes against the stand-in chat door and a scripted stand-in judge, the
judge answer parser, door errors, and runs that must not reach a door at all."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.engine.grade.doors import (
    GATEWAY_URL,
    OPENROUTER_URL,
    JevDecisionDoor,
    JevEndpoint,
    OpenResponsesJudge,
    answer_text,
    decision_pin,
    fails_over,
)
from eval_runner.engine.grade.graders import RunView, WorkspaceDirectory, grade_run
from eval_runner.engine.grade.patterns import PatternRunner
from eval_runner.engine.grade.votes import (
    JUDGE_SYSTEM,
    DoorError,
    Doors,
    judge_answer,
    judge_prompt,
)
from eval_runner.engine.run.trajectory import Trajectory, parse_log
from eval_runner.engine.testset.cases import Case, CaseFile, CaseFiles, parse_case
from eval_runner.engine.verdict.scores import Arm
from eval_runner.stand_ins.door import AnswerTable, StandInDoor

KEY = "jev-key-0123456789"
CHAT_KEY = "chat-key-0123456789"
PROMPT = "Give me an overview of the repository."
REPLY = "It is a Rust crate of six files; the largest is src/tables.rs."


def case_of(graders: dict[str, str]) -> Case:
    text = f'+++\nv = "openagents.eval-case.v1"\n+++\n\n{PROMPT}\n'
    files = tuple(CaseFile(f"{name}.md", source.encode()) for name, source in sorted(graders.items()))
    return parse_case("overview", "overview", Path("/nonexistent"), CaseFiles(text.encode(), None, files, ()))


def grader(front: str, body: str = "") -> str:
    return f"+++\n{front}\n+++\n\n{body}\n"


def trajectory(reply: str = REPLY) -> Trajectory:
    records = [
        {
            "record": "session",
            "schema_version": "ATIF-v1.8",
            "at": 1_000,
            "session": {"id": "s", "model": "m", "door": "d", "repository": "/r", "version": "1"},
        },
        {"record": "step", "step": {"at": 2_000, "source": "User", "message": PROMPT}},
        {"record": "step", "step": {"at": 3_000, "source": "Agent", "message": reply}},
        {"record": "end", "at": 4_000, "state": "ended"},
    ]
    return parse_log(b"".join(json.dumps(record).encode() + b"\n" for record in records), whole=True)


def completed(reply: str = REPLY, **fields: Any) -> RunView:
    return RunView("completed", trajectory=trajectory(reply), **fields)


NOUL = grader('type = "decision"\nquestion = "Does the answer name the largest file?"', "It names src/tables.rs.")


# ------------------------------------------------------------------------------------- stand-in Jev door


def noul(p: float) -> tuple[int, Any]:
    return 200, {"model": "jev-latest", "answers": {"grade": {"type": "noul", "noul": p}}, "usage": {}}


def score(s: float) -> tuple[int, Any]:
    answer = {"type": "score", "score": s, "confidence": 0.9, "legend": {}, "probabilities": {}}
    return 200, {"model": "jev-latest", "answers": {"grade": answer}}


def choice(picked: str, probabilities: dict[str, float]) -> tuple[int, Any]:
    answer = {"type": "choice", "choice": picked, "confidence": 0.5, "probabilities": probabilities}
    return 200, {"model": "jev-latest", "answers": {"grade": answer}}


def refusal(status: int, code: str, message: str) -> tuple[int, Any]:
    return status, {"error": {"code": code, "message": message}}


@dataclass
class StandInJev:
    """A stand-in System One door on loopback: requires `Bearer <key>`, answers from `script` in order
    (the last answer repeats), and keeps every request body it accepted."""

    key: str
    script: list[tuple[int, Any]]
    delay: float = 0.0
    requests: list[Any] = field(default_factory=list)
    refused: int = 0
    _runner: web.AppRunner | None = None
    url: str = ""

    async def __aenter__(self) -> StandInJev:
        app = web.Application()
        app.router.add_post("/v1/systemone", self._answer)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def endpoint(self, door: str = "", key: str | None = None) -> JevEndpoint:
        return JevEndpoint(door or self.url, self.url + "/v1/systemone", "jev-latest", self.key if key is None else key)

    async def _answer(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            self.refused += 1
            return web.json_response({"error": {"code": "unauthenticated", "message": "bad key"}}, status=401)
        self.requests.append(await request.json())
        if self.delay:
            await asyncio.sleep(self.delay)
        status, body = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return web.json_response(body, status=status)


@pytest.fixture
async def jev() -> AsyncIterator[StandInJev]:
    async with StandInJev(KEY, [noul(0.9)]) as door:
        yield door


def jev_door(*endpoints: JevEndpoint, **options: Any) -> JevDecisionDoor:
    return JevDecisionDoor(tuple(endpoints), backoff_seconds=0.0, **options)


async def decide(source: str, door: JevDecisionDoor | None, view: RunView | None = None) -> Any:
    grades = await grade_run(case_of({"g": source}), Arm.SUBJECT, view or completed(), Doors(decision=door))
    return grades.results[0]


# --------------------------------------------------------------------------------------------- decision


async def test_a_noul_decision_asks_with_the_task_focus_and_run_and_passes_on_two_votes(jev: StandInJev) -> None:
    result = await decide(NOUL, jev_door(jev.endpoint()))
    assert (result.passed, result.explanation) == (True, "2 of 2 answers at or above 0.5; 2 needed")
    assert [(v.answer, v.counted) for v in result.votes] == [("0.900", True), ("0.900", True)]
    assert (
        jev.requests
        == [
            {
                "state": {"task": PROMPT, "focus": "last_message", "run": REPLY},
                "model": "jev-latest",
                "questions": {
                    "grade": {
                        "type": "noul",
                        "instructions": "Does the answer name the largest file?",
                        "criteria": {"true": "It names src/tables.rs."},
                    }
                },
            }
        ]
        * 2
    )
    assert jev.refused == 0


@pytest.mark.parametrize(
    ("answers", "calls", "passed", "explanation"),
    [
        ([0.9, 0.2, 0.7], 3, True, "2 of 3 answers at or above 0.5; 2 needed"),
        ([0.2, 0.9, 0.1], 3, False, "1 of 3 answers at or above 0.5; 2 needed"),
        ([0.1, 0.2, 0.9], 2, False, "0 of 2 answers at or above 0.5; 2 needed"),
        ([0.5, 0.5], 2, True, "2 of 2 answers at or above 0.5; 2 needed"),
        ([0.4999, 0.5, 0.5], 3, True, "2 of 3 answers at or above 0.5; 2 needed"),
    ],
)
async def test_decision_votes_stop_early_once_decided(
    answers: list[float], calls: int, passed: bool, explanation: str
) -> None:
    async with StandInJev(KEY, [noul(p) for p in answers]) as jev:
        result = await decide(NOUL, jev_door(jev.endpoint()))
    assert (result.passed, result.explanation, len(jev.requests)) == (passed, explanation, calls)


async def test_the_threshold_is_inclusive() -> None:
    source = grader('type = "decision"\nquestion = "Is it right?"\nthreshold = 0.8')
    async with StandInJev(KEY, [noul(0.8), noul(0.79), noul(0.81)]) as jev:
        result = await decide(source, jev_door(jev.endpoint()))
    assert [(v.answer, v.counted) for v in result.votes] == [("0.800", True), ("0.790", False), ("0.810", True)]
    assert (result.passed, result.explanation) == (True, "2 of 3 answers at or above 0.8; 2 needed")
    assert "criteria" not in jev.requests[0]["questions"]["grade"]


async def test_a_score_decision_reads_the_level_over_the_top_level() -> None:
    source = grader(
        'type = "decision"\nquestion = { instructions = "How complete?", levels = ["none", "some", "most", "all"] }',
        "A rubric a Score does not carry.",
    )
    async with StandInJev(KEY, [score(2.0), score(1.0), score(3.0)]) as jev:
        result = await decide(source, jev_door(jev.endpoint()))
    assert [(v.answer, v.counted) for v in result.votes] == [("0.667", True), ("0.333", False), ("1.000", True)]
    assert result.passed
    assert jev.requests[0]["questions"] == {
        "grade": {"type": "score", "instructions": "How complete?", "criteria": ["none", "some", "most", "all"]}
    }


async def test_a_choice_decision_reads_the_mass_on_the_passing_options() -> None:
    source = grader(
        'type = "decision"\nquestion = { instructions = "How good?", options = { great = "Great", '
        'bad = "Bad", good = "Good" }, pass = ["good", "great"] }'
    )
    mass = {"bad": 0.3, "good": 0.3, "great": 0.4}
    async with StandInJev(KEY, [choice("great", mass), choice("good", {}), choice("bad", {})]) as jev:
        result = await decide(source, jev_door(jev.endpoint()))
    assert [(v.answer, v.counted) for v in result.votes] == [("0.700", True), ("1.000", True)]
    assert jev.requests[0]["questions"]["grade"] == {
        "type": "choice",
        "instructions": "How good?",
        "criteria": {"bad": "Bad", "good": "Good", "great": "Great"},
    }
    async with StandInJev(KEY, [choice("bad", {"bad": 0.5, "good": 0.5})]) as jev:
        odd = await decide(source, jev_door(jev.endpoint()))
    assert odd.explanation.startswith("the decision door failed on call 1: POST ")
    assert odd.explanation.endswith("answers.grade.probabilities name other options than the question")


async def test_a_decision_over_the_trajectory_or_a_file_sends_that_focus(tmp_path: Path) -> None:
    (tmp_path / "summary.md").write_text("six files")
    trajectory_focus = grader('type = "decision"\nquestion = "Fine?"\nfocus = "trajectory"')
    file_focus = grader('type = "decision"\nquestion = "Fine?"\nfocus = { file = "summary.md" }')
    async with StandInJev(KEY, [noul(0.9)]) as jev:
        await decide(trajectory_focus, jev_door(jev.endpoint()))
        await decide(file_focus, jev_door(jev.endpoint()), completed(workspace=WorkspaceDirectory(tmp_path)))
        missing = await decide(file_focus, jev_door(jev.endpoint()))
    state = jev.requests[0]["state"]
    assert state["focus"] == "trajectory"
    assert state["run"]["final_message"] == REPLY
    assert state["run"]["omitted_steps"] == 0
    assert jev.requests[2]["state"] == {"task": PROMPT, "focus": "file summary.md", "run": "six files"}
    assert (missing.passed, missing.explanation) == (False, "the run kept no workspace to read")
    assert len(jev.requests) == 4


async def test_an_answer_of_another_type_or_not_a_probability_fails_the_grader() -> None:
    async with StandInJev(KEY, [noul(0.9), score(1.0)]) as jev:
        result = await decide(NOUL, jev_door(jev.endpoint()))
    assert result.explanation == (
        "the decision door failed on call 2: the door answered a different question type than it was asked"
    )
    assert [(v.answer, v.counted) for v in result.votes] == [("0.900", True)]
    assert result.passed is False
    async with StandInJev(KEY, [noul(1.5)]) as jev:
        wild = await decide(NOUL, jev_door(jev.endpoint()))
    assert wild.explanation == "the decision door failed on call 1: the door answered 1.5, which is not a probability"
    async with StandInJev(KEY, [(200, {"answers": {"grade": {"type": "noul", "noul": "high"}}})]) as jev:
        unread = await decide(NOUL, jev_door(jev.endpoint()))
    assert unread.explanation.endswith(": answers.grade.noul is not a finite number")


async def test_a_refused_question_fails_the_grader_with_the_doors_reason_and_is_not_retried() -> None:
    async with StandInJev(KEY, [refusal(400, "invalid_request", "questions.grade.instructions is empty")]) as jev:
        result = await decide(NOUL, jev_door(jev.endpoint()))
    assert result.explanation == (
        f"the decision door failed on call 1: POST {jev.url}/v1/systemone: 400 questions.grade.instructions is empty"
    )
    assert (result.passed, result.votes, len(jev.requests)) == (False, (), 1)


async def test_no_decision_door_fails_the_grader() -> None:
    result = await decide(NOUL, None)
    assert (result.passed, result.explanation) == (False, "no decision door is configured")


async def test_a_door_that_cannot_pay_fails_over_and_is_benched() -> None:
    async with (
        StandInJev(KEY, [refusal(402, "payment_required", "no credits")]) as gateway,
        StandInJev(KEY, [noul(0.9)]) as typesafe,
    ):
        door = jev_door(gateway.endpoint("gateway"), typesafe.endpoint("typesafe"))
        assert door.describe() == "gateway → typesafe"
        first = await decide(NOUL, door)
        second = await decide(NOUL, door)
    assert first.passed
    assert second.passed
    assert len(gateway.requests) == 1  # benched after its 402: the next three calls skip it
    assert len(typesafe.requests) == 4


async def test_when_no_door_answers_the_first_doors_refusal_stands_after_retries() -> None:
    async with (
        StandInJev(KEY, [refusal(503, "unavailable", "gateway down")]) as gateway,
        StandInJev(KEY, [refusal(429, "rate_limited", "slow down")]) as typesafe,
    ):
        result = await decide(NOUL, jev_door(gateway.endpoint(), typesafe.endpoint(), retries=2))
    assert (
        result.explanation == f"the decision door failed on call 1: POST {gateway.url}/v1/systemone: 503 gateway down"
    )
    assert (len(gateway.requests), len(typesafe.requests)) == (3, 3)


async def test_a_refusal_of_the_question_at_a_later_door_stands_without_retry() -> None:
    async with (
        StandInJev(KEY, [refusal(500, "internal", "boom")]) as gateway,
        StandInJev(KEY, [refusal(422, "invalid_request", "bad state")]) as typesafe,
    ):
        result = await decide(NOUL, jev_door(gateway.endpoint(), typesafe.endpoint()))
    assert result.explanation.endswith(": 422 bad state")
    assert (len(gateway.requests), len(typesafe.requests)) == (1, 1)


async def test_a_wrong_key_is_benched_and_an_unreachable_or_slow_door_fails_over() -> None:
    async with StandInJev(KEY, [noul(0.9)]) as typesafe, StandInJev(KEY, [noul(0.9)], delay=1.0) as slow:
        closed = StandInJev(KEY, [noul(0.9)])
        async with closed:
            unreachable = closed.endpoint("closed")
        door = jev_door(
            typesafe.endpoint("wrong-key", key="not-the-key"),
            unreachable,
            slow.endpoint("slow"),
            typesafe.endpoint("typesafe"),
            seconds=0.3,
        )
        result = await decide(NOUL, door)
        assert result.passed
        assert typesafe.refused == 1  # benched after one 401
        alone = await decide(NOUL, jev_door(slow.endpoint(), seconds=0.3, retries=0))
    assert (
        alone.explanation == f"the decision door failed on call 1: POST {slow.url}/v1/systemone: no answer within 0.3 s"
    )
    assert "cannot reach the door" in (await decide(NOUL, jev_door(unreachable, retries=0))).explanation


async def test_a_key_a_door_echoes_never_reaches_the_reason() -> None:
    async with StandInJev(KEY, [refusal(400, "invalid_request", f"key {KEY} is not allowed here")]) as jev:
        result = await decide(NOUL, jev_door(jev.endpoint()))
    assert KEY not in result.explanation
    assert "key REDACTED is not allowed here" in result.explanation
    assert KEY not in repr(jev_door(jev.endpoint()))
    assert KEY not in repr(jev.endpoint())


@pytest.mark.parametrize(
    ("status", "code", "message", "expected"),
    [
        (None, None, "", True),
        (402, "payment_required", "", True),
        (404, None, "", True),
        (408, None, "", True),
        (413, "limit_exceeded", "", True),
        (429, None, "", True),
        (500, None, "", True),
        (599, "invalid_request", "", True),
        (401, None, "", True),
        (403, None, "", True),
        (400, "invalid_request", "bad", False),
        (422, "invalid_request", "bad", False),
        (400, None, "criteria must contain 2–26 candidates", True),
        (400, "invalid_request", "The state MUST NOT EXCEED 64 KiB", True),
        (400, "context_length_exceeded", "", True),
        (400, "unsupported_input", "", True),
        (422, "context_length_exceeded", "", False),
        (400, "busy", "", True),
        (409, "quota_exhausted", "", True),
        (409, "conflict", "", False),
    ],
)
def test_the_failover_rule(status: int | None, code: str | None, message: str, expected: bool) -> None:
    assert fails_over(status, code, message) is expected


def test_the_decision_pin_asks_the_fallbacks_first_and_typesafe_last() -> None:
    assert decision_pin(None, gateway_key="g") is None
    assert decision_pin("  ", gateway_key="g") is None
    only = decision_pin("t", typesafe_url="https://typesafe.example/")
    assert only is not None
    assert only.describe() == "https://typesafe.example"
    assert [(e.url, e.model) for e in only.endpoints] == [("https://typesafe.example/v1/systemone", "jev-latest")]
    pin = decision_pin("t", gateway_key="g", openrouter_key="o")
    assert pin is not None
    assert pin.describe() == "https://ai-gateway.vercel.sh → https://openrouter.ai → https://api.typesafe.ai"
    assert [(e.url, e.model, e.key) for e in pin.endpoints] == [
        (GATEWAY_URL, "typesafe-ai/jev", "g"),
        (OPENROUTER_URL, "typesafe/jev-1.13", "o"),
        ("https://api.typesafe.ai/v1/systemone", "jev-latest", "t"),
    ]
    skipped = decision_pin("t", gateway_key=" ", openrouter_key="o")
    assert skipped is not None
    assert len(skipped.endpoints) == 2
    with pytest.raises(ValueError, match="at least one"):
        JevDecisionDoor(())


# ------------------------------------------------------------------------------------------------- judge


JUDGE = grader('type = "judge"', "The answer names the largest file.")


async def judge_with(door: Any, source: str = JUDGE, view: RunView | None = None) -> Any:
    grades = await grade_run(case_of({"g": source}), Arm.SUBJECT, view or completed(), Doors(judge=door))
    return grades.results[0]


async def test_a_judge_asks_the_chat_door_three_times_and_passes_on_pass() -> None:
    async with StandInDoor(CHAT_KEY) as chat:
        result = await judge_with(OpenResponsesJudge(chat.url, CHAT_KEY, "judge-model"))
    assert (result.passed, result.explanation) == (True, "3 PASS and 0 FAIL of 3 answers; 2 PASS and no FAIL needed")
    assert [(v.answer, v.counted) for v in result.votes] == [("PASS", True)] * 3
    assert [(c.kind, c.model, c.instructions, c.stream) for c in chat.calls] == [
        ("judge", "judge-model", JUDGE_SYSTEM, False)
    ] * 3
    assert chat.calls[0].prompt == judge_prompt(REPLY, "The answer names the largest file.")
    assert chat.calls[0].prompt.endswith(
        '## Criterion\nThe answer names the largest file.\n\nAnswer only with "PASS" or "FAIL".'
    )


async def test_a_judge_stops_at_the_first_fail() -> None:
    async with StandInDoor(CHAT_KEY) as chat:
        result = await judge_with(OpenResponsesJudge(chat.url, CHAT_KEY, "m"), view=completed("I would have to look."))
    assert (result.passed, result.explanation) == (False, "0 PASS and 1 FAIL of 1 answers; 2 PASS and no FAIL needed")
    assert len(chat.calls) == 1


async def test_a_judge_over_the_trajectory_reads_pretty_json() -> None:
    source = grader('type = "judge"\nfocus = "trajectory"', "Mentions tables.")
    async with StandInDoor(CHAT_KEY, AnswerTable(judge_passes_on=('"final_message": "It is a Rust',))) as chat:
        result = await judge_with(OpenResponsesJudge(chat.url, CHAT_KEY, "m"), source)
    assert result.passed
    assert '\n  "first_steps": [\n' in chat.calls[0].prompt


async def test_a_judge_door_that_refuses_fails_the_grader_with_its_reason() -> None:
    async with StandInDoor(CHAT_KEY) as chat:
        result = await judge_with(OpenResponsesJudge(chat.url, "wrong-key", "m"))
    assert (result.passed, result.votes) == (False, ())
    assert (
        result.explanation == "the judge door failed on call 1: judge door answered 401: a valid door key is required"
    )
    assert chat.refused == 1
    assert "wrong-key" not in repr(OpenResponsesJudge(chat.url, "wrong-key", "m"))


async def test_no_judge_door_fails_the_grader() -> None:
    result = await judge_with(None)
    assert (result.passed, result.explanation) == (False, "no judge door is configured")


@dataclass
class StandInJudge:
    """A scripted judge door: answers (or raises, for an exception) in order; keeps the prompts."""

    script: Sequence[str | DoorError]
    prompts: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        return "stand-in judge"

    async def judge(self, system: str, user: str) -> str:
        answer = self.script[len(self.prompts)]
        self.prompts.append((system, user))
        if isinstance(answer, DoorError):
            raise answer
        return answer


@pytest.mark.parametrize(
    ("script", "calls", "passed", "votes"),
    [
        (["PASS", "pass.", "**Pass**"], 3, True, [("PASS", True)] * 3),
        (["PASS", "maybe", "PASS"], 3, True, [("PASS", True), ("maybe", False), ("PASS", True)]),
        (["maybe", "PASS", "PASS"], 3, True, [("maybe", False), ("PASS", True), ("PASS", True)]),
        (["maybe", "It passes", "PASS"], 2, False, [("maybe", False), ("It passes", False)]),
        (["PASS", "FAIL", "PASS"], 2, False, [("PASS", True), ("FAIL", False)]),
        (["PASS", "PASS", '"fail"'], 3, False, [("PASS", True), ("PASS", True), ("FAIL", False)]),
        (["FAIL", "PASS", "PASS"], 1, False, [("FAIL", False)]),
        ([" " + "x" * 100, "no"], 2, False, None),
    ],
)
async def test_judge_votes_and_early_stop(
    script: list[str], calls: int, passed: bool, votes: list[tuple[str, bool]] | None
) -> None:
    door = StandInJudge([*script, "PASS", "PASS"])
    result = await judge_with(door)
    assert (len(door.prompts), result.passed) == (calls, passed)
    if votes is not None:
        assert [(v.answer, v.counted) for v in result.votes] == votes
    else:
        assert result.votes[0].answer == "x" * 80 + "…"
    assert {system for system, _ in door.prompts} == {JUDGE_SYSTEM}


async def test_a_judge_door_error_keeps_the_votes_so_far() -> None:
    door = StandInJudge(["PASS", DoorError("judge door answered 502")])
    result = await judge_with(door)
    assert result.explanation == "the judge door failed on call 2: judge door answered 502"
    assert [(v.answer, v.counted) for v in result.votes] == [("PASS", True)]
    assert result.passed is False


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("PASS", True),
        ("pass", True),
        ("Pass", True),
        (" pass.\n", True),
        ('"PASS"', True),
        ("'PASS'", True),
        ("**PASS**", True),
        ("`PASS`", True),
        ("PASS...", True),
        ('"PASS."', True),
        ("**PASS.**", True),
        ("\u00a0PASS\u3000", True),
        ("FAIL", False),
        ("fail.", False),
        ('"FAIL"', False),
        ("**FAIL**", False),
        ("**PASS**.", None),
        ("PASS!", None),
        ("It passes", None),
        ("PASS, mostly", None),
        ("PASS FAIL", None),
        ("PA SS", None),
        ("PAſS", None),
        ("ＰＡＳＳ", None),
        ("", None),
        ("...", None),
        ("PASSED", None),
    ],
)
def test_the_judge_answer_is_the_bounded_word_or_nothing(text: str, answer: bool | None) -> None:
    assert judge_answer(text) is answer


@given(st.text())
def test_the_judge_answer_parser_never_raises(text: str) -> None:
    assert judge_answer(text) in (True, False, None)


@given(
    st.sampled_from(["PASS", "pass", "FAIL", "fAiL"]),
    st.text(alphabet=" \n\t\u00a0", max_size=3),
    st.text(alphabet="\"'*`", max_size=6),
    st.text(alphabet=".", max_size=3),
    st.text(alphabet="\"'*`", max_size=6),
)
def test_a_word_wrapped_in_quotes_stars_and_backticks_still_reads(
    word: str, space: str, lead: str, dots: str, trail: str
) -> None:
    assert judge_answer(space + lead + word + dots + trail + space) is (word.upper() == "PASS")


# --------------------------------------------------------------------------------- runs that ask no door


async def test_an_errored_run_fails_door_graders_without_a_single_request(jev: StandInJev) -> None:
    case = case_of({"decided": NOUL, "judged": JUDGE, "said": grader('type = "regex"', "Rust")})
    async with StandInDoor(CHAT_KEY) as chat:
        doors = Doors(decision=jev_door(jev.endpoint()), judge=OpenResponsesJudge(chat.url, CHAT_KEY, "m"))
        view = RunView("errored", "auth_failed", trajectory=trajectory())
        grades = await grade_run(case, Arm.SUBJECT, view, doors, patterns=PatternRunner())
        assert [(r.name, r.passed, r.explanation, r.votes) for r in grades.results] == [
            ("decided", False, "the run ended with auth_failed", ()),
            ("judged", False, "the run ended with auth_failed", ()),
            ("said", False, "the run ended with auth_failed", ()),
        ]
        cancelled = await grade_run(case, Arm.SUBJECT, RunView("cancelled", trajectory=trajectory()), doors)
        assert cancelled.results == ()
        assert (chat.calls, chat.refused) == ([], 0)
    assert (jev.requests, jev.refused) == ([], 0)


async def test_a_stopped_suite_is_graded_with_no_doors() -> None:
    case = case_of({"decided": NOUL, "judged": JUDGE, "receipt": grader('type = "receipt"\noperation = "m"')})
    grades = await grade_run(case, Arm.SUBJECT, completed(), Doors())
    assert [r.explanation for r in grades.results] == [
        "no decision door is configured",
        "no judge door is configured",
        "receipt replay is not supported",
    ]
    assert (grades.score, grades.passed) == (0.0, False)


def test_the_judges_answer_text_is_output_text_or_every_output_text_part() -> None:
    assert answer_text({"output_text": "PASS", "output": []}) == "PASS"
    parts = [
        {"type": "output_text", "text": "PA"},
        {"type": "refusal", "text": "no"},
        {"type": "output_text", "text": "SS"},
    ]
    assert (
        answer_text({"output": [{"type": "reasoning", "content": []}, {"type": "message", "content": parts}]}) == "PASS"
    )
    assert answer_text({"output": []}) is None
    assert answer_text({"output": "PASS"}) is None
    assert answer_text(["PASS"]) is None
