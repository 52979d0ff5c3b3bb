"""The doors graders call over HTTP: the chat door as a judge, and Jev as the decision door.

`OpenResponsesJudge` asks the chat door's Open Responses API as the reference's live judge door does;
a door that speaks only Anthropic Messages or Chat Completions gets `AnthropicMessagesJudge` or
`ChatCompletionsJudge` (`judge_door`; decisions.md, "The judge speaks the door's API").
`JevDecisionDoor` asks TypeSafe's System One API and its fallbacks in runner.md §2.2's order, with its
failover rule and bench. The request and answer shapes are not in runner.md: they were read from the
reference's public `jev` crate. Those shapes, and what is chosen here because nothing pins it (model,
bounds, retries), are in decisions.md ("The doors graders ask"). Error text is cut to 200 characters and
any key is scrubbed from it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

import aiohttp

from eval_runner.engine.grade.spec import ChoiceQuestion, DecisionQuestion, NoulQuestion, ScoreQuestion
from eval_runner.engine.grade.votes import (
    ChoiceAnswer,
    DecisionAnswer,
    DoorError,
    JsonValue,
    NoulAnswer,
    ScoreAnswer,
)

JUDGE_SECONDS = 120.0
DECISION_SECONDS = 30.0
QUESTION_ID = "grade"
TYPESAFE_URL = "https://api.typesafe.ai"
TYPESAFE_MODEL = "jev-latest"
SYSTEM_ONE_PATH = "/v1/systemone"
GATEWAY_DOOR = "https://ai-gateway.vercel.sh"
GATEWAY_URL = "https://ai-gateway.vercel.sh/typesafe/v1/systemone"
GATEWAY_MODEL = "typesafe-ai/jev"
OPENROUTER_DOOR = "https://openrouter.ai"
OPENROUTER_URL = "https://openrouter.ai/api/alpha/decisions"
OPENROUTER_MODEL = "typesafe/jev-1.13"
BENCH_SECONDS = 300.0
MESSAGE_CHARS = 200
#: Answers larger than this are not read (a decision answer is a few hundred bytes; a judge's one word).
MAX_ANSWER_BYTES = 4 * 1024 * 1024

#: Refusal codes that are a door's own reason, not the question's (runner.md §2.2).
DOOR_OWN_CODES = frozenset(
    {
        "unauthenticated",
        "payment_required",
        "not_admitted",
        "rate_limited",
        "quota_exhausted",
        "internal",
        "door_unavailable",
        "identity_mismatch",
        "busy",
        "unavailable",
        "timeout",
        "overloaded",
    }
)
#: Codes that at 400 name a door's limit rather than a bad question.
LIMIT_CODES = frozenset(
    {"request_too_large", "payload_too_large", "context_length_exceeded", "unsupported", "unsupported_input"}
)
LIMIT_PHRASES = (
    "criteria must contain 2",
    "must not exceed 64 kib",
    "input is too large to process",
    "exceeds the available context size",
    "the request exceeds the available context",
)
_STATUS_CODES = {
    401: "unauthenticated",
    402: "payment_required",
    403: "not_admitted",
    408: "timeout",
    429: "rate_limited",
    500: "internal",
    502: "door_unavailable",
    503: "unavailable",
    504: "timeout",
}


def fails_over(status: int | None, code: str | None, message: str = "") -> bool:
    """Whether a door's refusal leaves it for the next door (runner.md §2.2): `status` None is a timeout
    or no connection; HTTP 402, 404, 408, 413, 429 and any 5xx; a door-own code (a missing code is read
    from the status); at 400 a limit code or a message naming a door limit. A refusal of the question
    itself never fails over."""
    if status is None or status in (402, 404, 408, 413, 429) or 500 <= status <= 599:
        return True
    word = code or _STATUS_CODES.get(status)
    if word in DOOR_OWN_CODES:
        return True
    if status == 400:
        lowered = message.lower()
        return word in LIMIT_CODES or any(phrase in lowered for phrase in LIMIT_PHRASES)
    return False


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "REDACTED")
    return text


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


def _refusal_parts(body: bytes) -> tuple[str | None, str]:
    """(code, message) of an error body: `error.code`/`error.message` (TypeSafe), `error_type`/`message`
    (the gateway), or the text itself."""
    try:
        value = json.loads(body)
    except ValueError:
        return None, body.decode("utf-8", "replace")
    if not isinstance(value, dict):
        return None, body.decode("utf-8", "replace")
    error = value.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, str) or not code:
        code = value.get("error_type") if isinstance(value.get("error_type"), str) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        message = value.get("message") if isinstance(value.get("message"), str) else None
    if not isinstance(message, str) and isinstance(value.get("detail"), str):
        message = value["detail"]
    return code or None, message if isinstance(message, str) else ""


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    data = await response.content.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise DoorError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    return data


# ---------------------------------------------------------------------------------------------------- judge


def answer_text(body: JsonValue) -> str | None:
    """An Open Responses answer's text: `output_text`, else every `output_text` part of `output` joined."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("output_text"), str):
        return str(body["output_text"])
    output = body.get("output")
    if not isinstance(output, list):
        return None
    pieces = []
    for item in output:
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                pieces.append(part["text"])
    text = "".join(pieces)
    return text or None


class DoorApi(StrEnum):
    """The API a chat door speaks, which the judge must speak too: OpenAI Responses (the reference's
    judge), Anthropic Messages (a door only Claude Code's API), or Chat Completions (a door that has only that)."""

    RESPONSES = "responses"
    ANTHROPIC = "anthropic"
    CHAT = "chat"


#: The Anthropic API version the judge asks for, and the answer it allows (one word is asked for).
ANTHROPIC_VERSION = "2023-06-01"
JUDGE_MAX_TOKENS = 256


def message_text(body: JsonValue) -> str | None:
    """An Anthropic message's text: every `text` block of `content` joined."""
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, list):
        return None
    text = "".join(
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )
    return text or None


def completion_text(body: JsonValue) -> str | None:
    """A chat completion's text: the first choice's `message.content`."""
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) and content else None


@dataclass
class _DoorJudge:
    """The chat door as a judge, whichever API it speaks. `url` is the door's base (`CODER_DOOR_URL`); `key`
    never leaves its header, and never appears in a repr or an error. Each API says its name, its path, its
    request and where its answer's text is."""

    url: str
    key: str = field(repr=False)
    model: str
    seconds: float = JUDGE_SECONDS
    session: aiohttp.ClientSession | None = field(default=None, repr=False)
    #: The API's name in `describe`, and the path of its call under the door's base.
    label: ClassVar[str]
    path: ClassVar[str]

    def describe(self) -> str:
        return f"{self.label} {self.url.rstrip('/')} {self.model}"

    async def judge(self, system: str, user: str) -> str:
        body = self._body(system, user)
        target = f"{self.url.rstrip('/')}{self.path}"
        return await _judge_call(self.session, target, self._headers(), body, self.seconds, self.key, self._text)

    def _body(self, system: str, user: str) -> dict[str, JsonValue]:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        return _bearer(self.key)

    @staticmethod
    def _text(body: JsonValue) -> str | None:
        raise NotImplementedError


@dataclass
class OpenResponsesJudge(_DoorJudge):
    """The chat door as a judge over Open Responses (`POST /v1/responses`, not stored), as the reference's
    live judge door asks; the key goes as a bearer token."""

    label: ClassVar[str] = "open-responses"
    path: ClassVar[str] = "/v1/responses"

    def _body(self, system: str, user: str) -> dict[str, JsonValue]:
        return {
            "model": self.model,
            "instructions": system,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": user}]}],
            "stream": False,
            "store": False,
            "tools": [],
            "tool_choice": "none",
        }

    _text = staticmethod(answer_text)


@dataclass
class AnthropicMessagesJudge(_DoorJudge):
    """The chat door as a judge over Anthropic Messages (`POST /v1/messages`, not streamed), for a door that
    speaks only Anthropic's API. The key goes as `x-api-key`."""

    label: ClassVar[str] = "anthropic-messages"
    path: ClassVar[str] = "/v1/messages"

    def _body(self, system: str, user: str) -> dict[str, JsonValue]:
        return {
            "model": self.model,
            "max_tokens": JUDGE_MAX_TOKENS,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "stream": False,
        }

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self.key, "anthropic-version": ANTHROPIC_VERSION, "Accept": "application/json"}

    _text = staticmethod(message_text)


@dataclass
class ChatCompletionsJudge(_DoorJudge):
    """The chat door as a judge over Chat Completions (`POST /v1/chat/completions`, not streamed); the key
    goes as a bearer token."""

    label: ClassVar[str] = "chat-completions"
    path: ClassVar[str] = "/v1/chat/completions"

    def _body(self, system: str, user: str) -> dict[str, JsonValue]:
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "stream": False,
        }

    _text = staticmethod(completion_text)


JudgeDoors = OpenResponsesJudge | AnthropicMessagesJudge | ChatCompletionsJudge


def judge_door(api: DoorApi, url: str, key: str, model: str) -> JudgeDoors:
    """The judge that speaks `api` to the door at `url`."""
    if api is DoorApi.ANTHROPIC:
        return AnthropicMessagesJudge(url, key, model)
    if api is DoorApi.CHAT:
        return ChatCompletionsJudge(url, key, model)
    return OpenResponsesJudge(url, key, model)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Accept": "application/json"}


async def _judge_call(
    session: aiohttp.ClientSession | None,
    target: str,
    headers: dict[str, str],
    body: JsonValue,
    seconds: float,
    key: str,
    read_text: Callable[[JsonValue], str | None],
) -> str:
    """One judge request and its answer's text; every failure a `DoorError` without the key."""
    try:
        status, data = await _post(session, target, key, body, seconds, headers=headers)
    except DoorError as error:
        raise DoorError(_scrub(f"judge door: {error}", [key])) from None
    if not 200 <= status <= 299:
        _, message = _refusal_parts(data)
        detail = f": {_cut(message)}" if message.strip() else ""
        raise DoorError(_scrub(f"judge door answered {status}{detail}", [key]))
    try:
        text = read_text(json.loads(data))
    except ValueError:
        raise DoorError("judge door answer: not JSON") from None
    if text is None:
        raise DoorError("judge door answered no text")
    return text


async def _post(
    session: aiohttp.ClientSession | None,
    url: str,
    key: str,
    body: JsonValue,
    seconds: float,
    *,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """One POST of JSON with a bearer key (or the caller's `headers`) under one bound; (status, body).
    Transport failures raise `DoorError` naming the kind of failure, never the key."""
    headers = headers or _bearer(key)
    timeout = aiohttp.ClientTimeout(total=seconds)
    try:
        if session is None:
            async with aiohttp.ClientSession() as own:
                return await _send(own, url, headers, body, timeout)
        return await _send(session, url, headers, body, timeout)
    except TimeoutError:
        raise DoorError(f"no answer within {seconds:g} s") from None
    except aiohttp.ClientError as error:
        raise DoorError(f"cannot reach the door ({type(error).__name__})") from None


async def _send(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: JsonValue,
    timeout: aiohttp.ClientTimeout,
) -> tuple[int, bytes]:
    async with session.post(url, json=body, headers=headers, timeout=timeout, allow_redirects=False) as response:
        return response.status, await _read_bounded(response)


# ------------------------------------------------------------------------------------------------- decision


def jev_question(question: DecisionQuestion, rubric: str | None) -> dict[str, JsonValue]:
    """The System One question a decision grader asks (module docstring)."""
    if isinstance(question, NoulQuestion):
        asked: dict[str, JsonValue] = {"type": "noul", "instructions": question.instructions}
        if rubric is not None:
            asked["criteria"] = {"true": rubric}
        return asked
    if isinstance(question, ScoreQuestion):
        return {"type": "score", "instructions": question.instructions, "criteria": list(question.levels)}
    return {"type": "choice", "instructions": question.instructions, "criteria": dict(question.options)}


def read_decision(body: bytes, question: DecisionQuestion) -> DecisionAnswer:
    """The answer to `grade` in a System One answer body; `DoorError` naming the field otherwise."""
    try:
        value = json.loads(body)
    except ValueError:
        raise DoorError("the answer is not JSON") from None
    answers = value.get("answers") if isinstance(value, dict) else None
    if not isinstance(answers, dict):
        raise DoorError("the answer holds no `answers` object")
    answer = answers.get(QUESTION_ID)
    if not isinstance(answer, dict):
        raise DoorError(f"the answer holds no answer to `{QUESTION_ID}`")
    kind = answer.get("type")
    where = f"answers.{QUESTION_ID}"
    if kind == "noul":
        return NoulAnswer(_number(answer, "noul", where))
    if kind == "score":
        return ScoreAnswer(_number(answer, "score", where))
    if kind == "choice":
        choice = answer.get("choice")
        if not isinstance(choice, str):
            raise DoorError(f"{where}.choice is not a string")
        raw = answer.get("probabilities", {})
        if not isinstance(raw, dict):
            raise DoorError(f"{where}.probabilities is not an object")
        masses = tuple((option, _number(raw, option, f"{where}.probabilities")) for option in raw)
        if isinstance(question, ChoiceQuestion):
            asked = {name for name, _ in question.options}
            if masses and {option for option, _ in masses} != asked:
                raise DoorError(f"{where}.probabilities name other options than the question")
        return ChoiceAnswer(choice, masses)
    raise DoorError(f"{where}.type is {kind!r}, not noul, score or choice")


def _number(obj: Mapping[str, JsonValue], key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DoorError(f"{where}.{key} is not a finite number")
    return float(value)


@dataclass(frozen=True)
class JevEndpoint:
    """One Jev door: `door` names it (its base URL), `url` is the full decision URL, `model` its name for
    Jev. The key is never in a repr."""

    door: str
    url: str
    model: str
    key: str = field(repr=False)

    @classmethod
    def typesafe(cls, key: str, base_url: str = TYPESAFE_URL, model: str = TYPESAFE_MODEL) -> JevEndpoint:
        base = base_url.strip().rstrip("/")
        return cls(base, base + SYSTEM_ONE_PATH, model, key)

    @classmethod
    def gateway(cls, key: str) -> JevEndpoint:
        return cls(GATEWAY_DOOR, GATEWAY_URL, GATEWAY_MODEL, key)

    @classmethod
    def openrouter(cls, key: str) -> JevEndpoint:
        return cls(OPENROUTER_DOOR, OPENROUTER_URL, OPENROUTER_MODEL, key)


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A door's refusal: `status` None for a timeout or no connection."""

    reason: str
    status: int | None
    fails_over: bool

    @property
    def benches(self) -> bool:
        return self.status in (401, 402)

    @property
    def retried(self) -> bool:
        """What the SDK's retry policy retries: a timeout, no connection, 408, 429, any 5xx."""
        return self.status is None or self.status in (408, 429) or 500 <= self.status <= 599


@dataclass
class JevDecisionDoor:
    """Jev through its doors, in order, with runner.md §2.2's failover: a door is left for the next only
    for a reason of its own; a door refusing 401/402 is benched (skipped) for `bench_seconds`; when no
    door answers, the first door's refusal stands. `describe()` is the pin's door list, `a → b`."""

    endpoints: tuple[JevEndpoint, ...]
    seconds: float = DECISION_SECONDS
    retries: int = 2
    backoff_seconds: float = 0.5
    bench_seconds: float = BENCH_SECONDS
    session: aiohttp.ClientSession | None = field(default=None, repr=False)
    _benched: dict[str, tuple[float, _Refusal]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("a decision door needs at least one Jev door")

    def describe(self) -> str:
        return " → ".join(endpoint.door for endpoint in self.endpoints)

    async def decide(
        self, state: Mapping[str, JsonValue], question: DecisionQuestion, rubric: str | None
    ) -> DecisionAnswer:
        questions = {QUESTION_ID: jev_question(question, rubric)}
        wait = self.backoff_seconds
        for attempt in range(self.retries + 1):
            outcome = await self._ask_doors(dict(state), questions, question)
            if not isinstance(outcome, _Refusal):
                return outcome
            if not outcome.retried or attempt == self.retries:
                raise DoorError(outcome.reason)
            await asyncio.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _ask_doors(
        self, state: dict[str, JsonValue], questions: dict[str, JsonValue], question: DecisionQuestion
    ) -> DecisionAnswer | _Refusal:
        first: _Refusal | None = None
        for endpoint in self.endpoints:
            refusal = self._bench_of(endpoint.door)
            if refusal is None:
                answer = await self._ask(endpoint, state, questions, question)
                if not isinstance(answer, _Refusal):
                    return answer
                refusal = answer
                if refusal.benches:
                    self._benched[endpoint.door] = (time.monotonic() + self.bench_seconds, refusal)
            if not refusal.fails_over:
                return refusal
            first = first or refusal
        assert first is not None
        return first

    def _bench_of(self, door: str) -> _Refusal | None:
        held = self._benched.get(door)
        if held is None:
            return None
        if time.monotonic() >= held[0]:
            del self._benched[door]
            return None
        return held[1]

    async def _ask(
        self,
        endpoint: JevEndpoint,
        state: dict[str, JsonValue],
        questions: dict[str, JsonValue],
        question: DecisionQuestion,
    ) -> DecisionAnswer | _Refusal:
        body = {"state": state, "model": endpoint.model, "questions": questions}
        secrets = [item.key for item in self.endpoints]
        try:
            status, data = await _post(self.session, endpoint.url, endpoint.key, body, self.seconds)
        except DoorError as error:
            return _Refusal(_scrub(f"POST {endpoint.url}: {error}", secrets), None, True)
        if not 200 <= status <= 299:
            code, message = _refusal_parts(data)
            text = _cut(message) if message.strip() else f"HTTP {status} without an error message"
            reason = _scrub(f"POST {endpoint.url}: {status} {text}", secrets)
            return _Refusal(reason, status, fails_over(status, code, message))
        try:
            return read_decision(data, question)
        except DoorError as error:
            # A 2xx that does not read is the door's own fault, but the reference does not fail it over.
            return _Refusal(_scrub(f"POST {endpoint.url}: {error}", secrets), status, False)


def decision_pin(
    typesafe_key: str | None,
    *,
    typesafe_url: str = TYPESAFE_URL,
    gateway_key: str | None = None,
    openrouter_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
) -> JevDecisionDoor | None:
    """The decision door of runner.md §2.2 from resolved keys: none without a TypeSafe key; otherwise the
    gateway (when its key is known), then OpenRouter (likewise), then TypeSafe last. Blank keys add no
    door. (Lending the chat door's key to the gateway is the configuration's rule, applied before.)"""
    if typesafe_key is None or not typesafe_key.strip():
        return None
    endpoints = []
    if gateway_key is not None and gateway_key.strip():
        endpoints.append(JevEndpoint.gateway(gateway_key.strip()))
    if openrouter_key is not None and openrouter_key.strip():
        endpoints.append(JevEndpoint.openrouter(openrouter_key.strip()))
    endpoints.append(JevEndpoint.typesafe(typesafe_key.strip(), typesafe_url))
    return JevDecisionDoor(tuple(endpoints), session=session)
