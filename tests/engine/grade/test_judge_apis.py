"""The judge speaks the door's API: Anthropic Messages to a door that has only that (Claude Code's), Chat
Completions to a door that has only that, against the scripted stand-in doors."""

from __future__ import annotations

import pytest

from eval_runner.engine.grade.doors import (
    AnthropicMessagesJudge,
    ChatCompletionsJudge,
    DoorApi,
    OpenResponsesJudge,
    judge_door,
)
from eval_runner.engine.grade.spec import JudgeGrader
from eval_runner.engine.grade.votes import JUDGE_SYSTEM, DoorError, grade_judge, judge_prompt
from eval_runner.stand_ins.scripted_doors import DoorCall, Play, Say, ScriptedDoor

KEY = "judge-door-key-42"
GRADER = JudgeGrader(name="names-it", criteria="The answer names the language.")
RECORD = "It is written in Rust."
PLAYS = (
    Play("names the language", (Say("PASS"),)),
    Play("names the author", (Say("**FAIL**"),)),
)


async def test_the_judge_speaks_anthropic_messages_to_an_anthropic_door() -> None:
    async with ScriptedDoor(KEY, PLAYS, speaks=("anthropic",)) as door:
        judge = AnthropicMessagesJudge(door.url, KEY, "claude-judge")
        checked = await grade_judge(GRADER, RECORD, judge)
    assert checked.passed
    assert [vote.answer for vote in checked.votes] == ["PASS"] * 3
    assert door.calls == [DoorCall("anthropic", "POST", "/v1/messages", "claude-judge", False, 0, "say")] * 3
    assert door.refused == 0


async def test_a_fail_from_an_anthropic_door_fails_the_grader() -> None:
    grader = JudgeGrader(name="author", criteria="The answer names the author.")
    async with ScriptedDoor(KEY, PLAYS, speaks=("anthropic",)) as door:
        checked = await grade_judge(grader, RECORD, AnthropicMessagesJudge(door.url, KEY, "m"))
    assert (checked.passed, [vote.answer for vote in checked.votes]) == (False, ["FAIL"])


async def test_the_responses_judge_cannot_judge_over_an_anthropic_door_which_is_why_the_api_is_chosen() -> None:
    async with ScriptedDoor(KEY, PLAYS, speaks=("anthropic",)) as door:
        checked = await grade_judge(GRADER, RECORD, OpenResponsesJudge(door.url, KEY, "m"))
    assert not checked.passed
    assert checked.explanation.startswith("the judge door failed on call 1: judge door answered 404")


async def test_the_judge_speaks_chat_completions_to_a_door_that_has_only_that() -> None:
    async with ScriptedDoor(KEY, PLAYS, speaks=("chat",)) as door:
        checked = await grade_judge(GRADER, RECORD, ChatCompletionsJudge(door.url, KEY, "gpt-judge"))
    assert checked.passed
    assert {call.api for call in door.calls} == {"chat"}
    assert len(door.calls) == 3


@pytest.mark.parametrize("api", list(DoorApi))
async def test_a_wrong_key_is_a_door_error_that_never_names_a_key(api: DoorApi) -> None:
    async with ScriptedDoor(KEY, PLAYS) as door:
        judge = judge_door(api, door.url, "wrong-judge-key", "m")
        with pytest.raises(DoorError) as caught:
            await judge.judge(JUDGE_SYSTEM, judge_prompt(RECORD, GRADER.criteria))
    assert str(caught.value).startswith("judge door answered 401")
    assert "wrong-judge-key" not in str(caught.value)
    assert "wrong-judge-key" not in repr(judge)
    assert door.refused == 1


def test_each_api_has_its_judge() -> None:
    assert isinstance(judge_door(DoorApi.ANTHROPIC, "http://d", "k", "m"), AnthropicMessagesJudge)
    assert isinstance(judge_door(DoorApi.CHAT, "http://d", "k", "m"), ChatCompletionsJudge)
    responses = judge_door(DoorApi.RESPONSES, "http://d/", "k", "m")
    assert isinstance(responses, OpenResponsesJudge)
    assert responses.describe() == "open-responses http://d m"
