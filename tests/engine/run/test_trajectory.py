"""ATIF reading: the reference's fixture logs, documents built from Harbor RFC 0001's example, faults, fuzz."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.run.atif_log import DECISION_CALL_SCHEMA, INTERRUPTED, LogFault
from eval_runner.engine.run.trajectory import (
    SCHEMA_VERSION,
    Source,
    TrajectoryError,
    atif_digest,
    parse_document,
    parse_log,
    parse_trajectory,
    read_trajectory,
)
from tests.support.paths import TESTS

FIXTURES = TESTS / "vectors" / "reference" / "atif"


def lines(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def session(at: int = 1_000, version: str = "ATIF-v1.8", **fields: Any) -> dict[str, Any]:
    body = {"id": "s1", "model": "m1", "door": "d", "repository": "/repo", "version": "0.1.0", **fields}
    return {"record": "session", "schema_version": version, "at": at, "session": body}


def step(source: str, message: str, at: int = 2_000, **fields: Any) -> dict[str, Any]:
    return {"record": "step", "step": {"at": at, "source": source, "message": message, **fields}}


def call(name: str, **fields: Any) -> dict[str, Any]:
    body = {"id": f"call-{name}", "name": name, "arguments": {}, "output": "", "outcome": "Completed"}
    return {**body, "milliseconds": 1, **fields}


END = {"record": "end", "at": 5_000, "state": "ended"}


# --------------------------------------------------------------------------------- the reference's fixture


@pytest.mark.parametrize("name", ["parent", "child"])
def test_the_reference_fixture_logs_render_the_steps_their_manifests_name(name: str) -> None:
    data = (FIXTURES / f"{name}.atif.jsonl").read_bytes()
    manifest = json.loads((FIXTURES / f"{name}.manifest.json").read_text())
    assert "sha256:" + hashlib.sha256(data).hexdigest() == manifest["artifact"]["digest"]
    trajectory = parse_log(data, whole=True)
    assert atif_digest(trajectory.document["steps"]) == manifest["steps_digest"]
    assert len(trajectory.steps) == manifest["step_count"]
    assert trajectory.state == manifest["state"]
    assert trajectory.document["trajectory_id"] == manifest["trajectory_id"]
    assert trajectory.document["schema_version"] == manifest["schema_version"] == SCHEMA_VERSION
    assert trajectory.whole


def test_the_fixture_recorded_at_v1_7_reads_the_same_and_keeps_its_declared_version() -> None:
    data = (FIXTURES / "parent.atif.jsonl").read_bytes()
    old = parse_log(data.replace(b'"ATIF-v1.8"', b'"ATIF-v1.7"'), whole=True)
    new = parse_log(data, whole=True)
    assert old.declared_version == "ATIF-v1.7"
    assert old.document["schema_version"] == SCHEMA_VERSION
    assert atif_digest(old.document["steps"]) == atif_digest(new.document["steps"])
    assert old.final_message == "The sub-agent fixed the typo; README.md now reads correctly."
    assert old.document["extra"]["directive"] == "Fix the typo in README.md."
    assert old.document["final_metrics"]["total_prompt_tokens"] == 812 + 1204


# --------------------------------------------------------------------- a document from the RFC's example


def rfc_example() -> dict[str, Any]:
    """Harbor RFC 0001 §IV's multi-step example (ATIF-v1.4), token arrays shortened."""
    return {
        "schema_version": "ATIF-v1.4",
        "session_id": "025B810F-B3A2-4C67-93C0-FE7A142A947A",
        "agent": {"name": "harbor-agent", "version": "1.0.0", "model_name": "gemini-2.5-flash", "extra": {}},
        "notes": "Initial test trajectory for financial data retrieval.",
        "extra": {},
        "final_metrics": {"total_prompt_tokens": 1120, "total_completion_tokens": 124, "total_steps": 3},
        "steps": [
            {
                "step_id": 1,
                "timestamp": "2025-10-11T10:30:00Z",
                "source": "user",
                "message": "What is the current trading price of Alphabet (GOOGL)?",
                "extra": {},
            },
            {
                "step_id": 2,
                "timestamp": "2025-10-11T10:30:02Z",
                "source": "agent",
                "model_name": "gemini-2.5-flash",
                "reasoning_effort": "medium",
                "message": "I will search for the current trading price and volume for GOOGL.",
                "reasoning_content": "The request requires two data points.",
                "tool_calls": [
                    {
                        "tool_call_id": "call_price_1",
                        "function_name": "financial_search",
                        "arguments": {"ticker": "GOOGL", "metric": "price"},
                    },
                    {
                        "tool_call_id": "call_volume_2",
                        "function_name": "financial_search",
                        "arguments": {"ticker": "GOOGL", "metric": "volume"},
                    },
                ],
                "observation": {
                    "results": [
                        {"source_call_id": "call_price_1", "content": "GOOGL is currently trading at $185.35"},
                        {"source_call_id": "call_volume_2", "content": "GOOGL volume: 1.5M shares traded."},
                    ]
                },
                "metrics": {"prompt_tokens": 520, "completion_tokens": 80, "cached_tokens": 200, "cost_usd": 0.00045},
            },
            {
                "step_id": 3,
                "timestamp": "2025-10-11T10:30:05Z",
                "source": "agent",
                "model_name": "gemini-2.5-flash",
                "reasoning_effort": "low",
                "message": "As of October 11, 2025, Alphabet (GOOGL) is trading at $185.35.",
                "metrics": {"prompt_tokens": 600, "completion_tokens": 44, "logprobs": [-0.1, -0.05]},
            },
        ],
    }


def test_the_rfc_example_document_reads_as_a_typed_trajectory() -> None:
    trajectory = parse_document(json.dumps(rfc_example()).encode())
    assert trajectory.declared_version == "ATIF-v1.4"
    assert trajectory.document["schema_version"] == SCHEMA_VERSION
    assert (trajectory.agent.name, trajectory.agent.model_name) == ("harbor-agent", "gemini-2.5-flash")
    assert [s.source for s in trajectory.steps] == [Source.USER, Source.AGENT, Source.AGENT]
    assert trajectory.final_message == "As of October 11, 2025, Alphabet (GOOGL) is trading at $185.35."
    calls = trajectory.calls
    assert [(c.step_id, c.call_id, c.function_name) for c in calls] == [
        (2, "call_price_1", "financial_search"),
        (2, "call_volume_2", "financial_search"),
    ]
    assert calls[0].input_text == '{"metric":"price","ticker":"GOOGL"}'
    assert len(trajectory.calls_to("financial_search")) == 2
    assert trajectory.steps[1].observations[0].content == "GOOGL is currently trading at $185.35"
    assert trajectory.state is None
    assert trajectory.whole


def test_the_kept_document_reads_back_to_the_same_trajectory() -> None:
    first = parse_document(json.dumps(rfc_example()).encode())
    again = parse_trajectory(first.document_bytes())
    assert again.steps == first.steps
    assert again.calls == first.calls
    assert first.document_bytes().endswith(b"}\n")
    assert json.loads(first.document_text()) == first.document


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d.pop("schema_version"), "schema_version"),
        (lambda d: d.update(schema_version="ATIF-v2.0"), "schema_version"),
        (lambda d: d.pop("session_id"), "session_id"),
        (lambda d: d["agent"].pop("version"), "agent.version"),
        (lambda d: d.update(steps={}), "steps"),
        (lambda d: d["steps"][0].update(source="tool"), "steps[0].source"),
        (lambda d: d["steps"][0].update(step_id=0), "steps[0].step_id"),
        (lambda d: d["steps"][0].update(step_id=True), "steps[0].step_id"),
        (lambda d: d["steps"][0].pop("message"), "steps[0].message"),
        (lambda d: d["steps"][0].update(message=3), "steps[0].message"),
        (lambda d: d["steps"][0].update(model_name="x"), "steps[0].model_name"),
        (lambda d: d["steps"][0].update(tool_calls=[]), "steps[0].tool_calls"),
        (lambda d: d["steps"][1]["tool_calls"][0].pop("function_name"), "steps[1].tool_calls[0].function_name"),
        (lambda d: d["steps"][1]["tool_calls"][0].pop("arguments"), "steps[1].tool_calls[0].arguments"),
        (lambda d: d["steps"][1].update(observation={"results": 1}), "steps[1].observation.results"),
        (lambda d: d["steps"][2].update(message=[{"type": "video"}]), "steps[2].message[0]"),
        (lambda d: d["steps"][2].update(message=[{"type": "text"}]), "steps[2].message[0]"),
    ],
)
def test_a_document_that_breaks_the_rfc_is_refused_naming_the_field(change: Any, where: str) -> None:
    document = rfc_example()
    change(document)
    with pytest.raises(TrajectoryError) as raised:
        parse_document(json.dumps(document).encode())
    assert raised.value.where.startswith(where)


@pytest.mark.parametrize("data", [b"", b"[]", b"not json", b'{"a":1,"a":2}', b'{"a":NaN}', b"\xff\xfe"])
def test_bytes_that_are_not_a_json_object_are_refused(data: bytes) -> None:
    with pytest.raises(TrajectoryError):
        parse_trajectory(data)


def test_content_parts_are_read_and_a_multimodal_step_is_not_the_final_message() -> None:
    document = rfc_example()
    parts = [{"type": "text", "text": "Here is the chart."}, {"type": "image", "source": {"path": "c.png"}}]
    document["steps"].append({"step_id": 4, "source": "agent", "message": parts})
    trajectory = parse_document(json.dumps(document).encode())
    assert trajectory.steps[3].message == "Here is the chart."
    assert trajectory.steps[3].multimodal
    assert trajectory.final_message == "As of October 11, 2025, Alphabet (GOOGL) is trading at $185.35."


# --------------------------------------------------------------------------------------------- the log form


def test_a_logged_program_step_reads_as_a_call_under_every_name_it_answers_to() -> None:
    data = lines(
        session(),
        step("User", "Map the repository."),
        step("Agent", "", call=call("repo_map", arguments={"operation": "map"}, extra={"step": "repo_map"})),
        step("Agent", "", call=call("walk", extra={"step": "walk", "program": "repo-map-brief"})),
        step("System", "checked", call=call("probe", outcome="Failed")),
        step("Agent", "", call=call("classify", extra={"schema": DECISION_CALL_SCHEMA})),
        step("Agent", "It is a Rust crate.", tokens=[10, 5], milliseconds=7),
        END,
    )
    trajectory = parse_log(data, whole=True)
    document = trajectory.document
    agent_call = document["steps"][1]
    assert agent_call["tool_calls"] == [
        {
            "tool_call_id": "call-repo_map",
            "function_name": "repo_map",
            "arguments": {"operation": "map"},
            "extra": {"step": "repo_map"},
        }
    ]
    assert agent_call["observation"]["results"][0]["extra"] == {"status": "completed", "duration_ms": 1}
    assert agent_call["model_name"] == "m1"
    assert document["steps"][3]["extra"]["call"]["status"] == "failed"
    assert document["steps"][5]["metrics"] == {"prompt_tokens": 10, "completion_tokens": 5}
    assert document["steps"][5]["extra"] == {"duration_ms": 7}
    names = [c.function_name for c in trajectory.calls]
    assert names == ["repo_map", "walk", "probe", "classify"]
    assert trajectory.calls[0].operations == ("repo_map", "map")
    assert trajectory.calls[1].operations == ("walk", "repo-map-brief")
    assert [len(trajectory.calls_to(n)) for n in ("map", "repo-map-brief", "probe")] == [1, 1, 1]
    assert [c.is_decision for c in trajectory.calls] == [False, False, False, True]
    metrics = document["final_metrics"]["extra"]
    assert (metrics["calls_total"], metrics["tool_calls_total"], metrics["tool_calls_failed"]) == (4, 3, 1)
    assert document["final_metrics"]["extra"]["wall_seconds"] == 4
    assert trajectory.final_message == "It is a Rust crate."


def test_a_torn_last_line_costs_that_line_only_and_the_session_reads_as_interrupted() -> None:
    data = lines(session(), step("User", "hello"), step("Agent", "hi", at=3_000)) + b'{"record":"step","st'
    trajectory = parse_log(data)
    assert trajectory.faults == (LogFault(4, "torn"),)
    assert trajectory.state == INTERRUPTED
    assert not trajectory.whole
    assert trajectory.final_message == "hi"
    assert trajectory.document["extra"]["unreadable_lines"] == 1
    with pytest.raises(TrajectoryError, match="torn") as raised:
        parse_log(data, whole=True)
    assert raised.value.where == "line 4"
    with pytest.raises(TrajectoryError, match="interrupted"):
        parse_log(lines(session(), step("User", "hello")), whole=True)


def test_each_kind_of_bad_line_is_a_fault_with_the_reference_word() -> None:
    data = (
        lines(step("User", "too early"), session())
        + b"\xff\n"
        + b"not json\n"
        + lines(
            {"record": "note"},
            session(),
            step("Robot", "x"),
            step("Agent", "ok", at=-1),
            step("Agent", "done"),
            END,
            END,
            step("Agent", "late"),
        )
    )
    trajectory = parse_log(data)
    assert [fault.kind for fault in trajectory.faults] == [
        "before_session",
        "not_utf8",
        "not_json",
        "unknown_record",
        "repeated_session",
        "bad_step",
        "bad_step",
        "repeated_end",
        "after_end",
    ]
    assert [s.message for s in trajectory.steps] == ["done"]
    assert trajectory.state == "ended"


def test_a_log_without_a_readable_session_record_is_refused() -> None:
    with pytest.raises(TrajectoryError, match="no session record"):
        parse_log(lines(step("User", "hi"), END))
    with pytest.raises(TrajectoryError, match="no session record"):
        parse_log(lines(session(version="ATIF-v2.0"), step("User", "hi")))
    broken = session()
    del broken["session"]["model"]
    with pytest.raises(TrajectoryError, match="no session record"):
        parse_log(lines(broken))


def test_either_form_is_recognised_and_a_file_error_names_the_file(tmp_path: Path) -> None:
    log = parse_trajectory(lines(session(), step("Agent", "hi"), END))
    assert log.final_message == "hi"
    assert parse_trajectory(json.dumps(rfc_example()).encode()).session_id.startswith("025B810F")
    with pytest.raises(TrajectoryError) as raised:
        read_trajectory(tmp_path / "trajectory.atif.jsonl")
    assert raised.value.where.startswith("trajectory.atif.jsonl")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(TrajectoryError, match="larger than 1024"):
        read_trajectory(big, max_bytes=1024)


def test_a_far_future_timestamp_still_renders() -> None:
    at = 2**53 - 1
    trajectory = parse_log(lines(session(at=0), step("Agent", "later", at=at), END))
    assert trajectory.steps[0].timestamp is not None
    assert trajectory.steps[0].timestamp.endswith(".991Z")
    assert parse_log(lines(session(at=0), step("User", "x", at=0), END)).steps[0].timestamp == (
        "1970-01-01T00:00:00.000Z"
    )


def test_a_door_grader_sees_both_ends_of_a_long_trajectory() -> None:
    records = [session()] + [step("Agent", f"step {index}", at=2_000 + index) for index in range(30)] + [END]
    view = parse_log(lines(*records)).door_view()
    assert len(view["first_steps"]) == 12
    assert len(view["last_steps"]) == 12
    assert view["omitted_steps"] == 6
    assert view["final_message"] == "step 29"
    short = parse_log(lines(session(), step("Agent", "one"), END)).door_view()
    assert (len(short["first_steps"]), short["last_steps"], short["omitted_steps"]) == (1, [], 0)


def test_the_same_log_bytes_always_render_the_same_document() -> None:
    data = (FIXTURES / "parent.atif.jsonl").read_bytes()
    assert parse_log(data).document_bytes() == parse_log(data).document_bytes()
    assert parse_log(data).document["extra"]["exported_at"] == "2026-09-28T00:00:09.900Z"


# ---------------------------------------------------------------------------------------------------- fuzz


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_raise_only_trajectory_error(data: bytes) -> None:
    with contextlib.suppress(TrajectoryError):
        parse_trajectory(data)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_record = st.fixed_dictionaries(
    {"record": st.sampled_from(["session", "step", "end", "other"])},
    optional={
        "at": _json,
        "schema_version": st.sampled_from(["ATIF-v1.8", "ATIF-v1.0", "x"]),
        "state": _json,
        "session": st.fixed_dictionaries(
            {},
            optional={key: st.text(max_size=6) | _json for key in ("id", "model", "door", "repository", "version")},
        ),
        "step": st.fixed_dictionaries(
            {},
            optional={
                "at": st.integers(-5, 2**64 + 5) | _json,
                "source": st.sampled_from(["User", "Agent", "System", "agent", "x"]),
                "message": st.text(max_size=8) | _json,
                "call": st.dictionaries(
                    st.sampled_from(["id", "name", "arguments", "output", "outcome", "milliseconds", "extra"]),
                    _json | st.sampled_from(["Completed", "Failed"]),
                ),
                "tokens": _json,
                "extensions": _json,
            },
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_record, max_size=6), st.booleans(), st.booleans())
def test_structured_log_records_raise_only_trajectory_error(records: list[Any], torn: bool, whole: bool) -> None:
    data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
    if torn:
        data = data[:-1]
    try:
        trajectory = parse_trajectory(data, whole=whole)
    except TrajectoryError:
        return
    trajectory.document_bytes()
    assert isinstance(trajectory.final_message, str | None)
    assert all(isinstance(c.input_text, str) for c in trajectory.calls)
