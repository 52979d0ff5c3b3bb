"""What a trainer builds before anything is signed, and what it shows afterwards: subjects from a DefinitionRef
or an extension directory (the same ref the runner's catalog resolves), drafts from a file or a local
test set (exact texts, warnings for what stays behind), request records that round-trip, the verdict
table's rows from a report's measurements, and the words for each way a run can end.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from eval_runner.cli.trainer import RunView, run_json, show_run
from eval_runner.contracts.answers import AcceptedBody, ProgressBody, ResultBody
from eval_runner.contracts.draft import Draft
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.hosted import RunInput
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import canonical, read
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey, sign
from eval_runner.trainer.client import (
    Request,
    RunAnswer,
    TrainerError,
    build_request,
    extension_tool,
    read_draft,
    run_input,
    subject_ref,
    suite_draft,
)
from tests.support.paths import EXAMPLE

RUNNER = SecretKey.generate().public_key().to_hex()


def test_an_extension_names_the_subject_the_runner_catalog_resolves() -> None:
    tool = extension_tool(EXAMPLE)
    assert tool.definition == Catalog.load([EXAMPLE]).tools[0].definition
    assert (tool.name, tool.evals) == ("Codebase brief", EXAMPLE / "evals")
    assert tool.summary.startswith("A program over the repo_map guest")
    with pytest.raises(TrainerError, match=r"package\.json"):
        extension_tool(EXAMPLE / "evals")


def test_a_subject_is_a_definition_ref_as_json_or_in_a_file(tmp_path: Path) -> None:
    definition = extension_tool(EXAMPLE).definition
    text = json.dumps(definition.to_json())
    (tmp_path / "subject.json").write_text(text)
    from_text, from_file = subject_ref(text), subject_ref(str(tmp_path / "subject.json"))
    assert from_text == from_file
    assert from_text.definition == definition
    assert from_text.name == "codebase-brief"
    with pytest.raises(TrainerError, match="No such file") as missing:
        subject_ref(str(tmp_path / "missing.json"))
    assert missing.value.code == "input"
    with pytest.raises(TrainerError, match=r"the subject: malformed: subject\.id"):
        subject_ref('{"id": "tool", "artifact": {}}')


def test_a_local_test_set_becomes_a_draft_of_its_exact_texts(tmp_path: Path) -> None:
    tool = extension_tool(EXAMPLE)
    drafted = suite_draft(EXAMPLE / "evals", tool.draft_tool())
    draft = drafted.draft
    assert draft.tool.catalog == tool.definition
    assert [(case.id, case.kind) for case in draft.cases] == [
        ("greeting", "should-not-fire"),
        ("overview", "should-fire"),
    ]
    for case in draft.cases:
        local = EXAMPLE / "evals" / case.id
        assert case.prompt == (local / "prompt.md").read_text()
        assert [(grader.name, grader.text) for grader in case.graders] == [
            (path.stem, path.read_text()) for path in sorted((local / "graders").glob("*.md"))
        ]
    assert drafted.warnings == (
        "overview: its fixtures (6 files) stay behind; a draft carries only prompt.md and graders/*.md, "
        "so the run starts in an empty directory",
    )
    # JCS of the parsed draft is what goes on the wire
    assert Draft.parse(read(canonical(draft.to_json()))) == draft

    evals = tmp_path / "evals"
    shutil.copytree(EXAMPLE / "evals" / "greeting", evals / "greeting")
    (evals / "greeting" / "case.toml").write_text('v = "openagents.eval-case.v1"\n')
    assert suite_draft(evals, tool.draft_tool()).warnings == (
        "greeting: case.toml stays behind; a draft carries only prompt.md and graders/*.md",
    )
    (evals / "greeting" / "prompt.md").write_text((EXAMPLE / "evals/greeting/prompt.md").read_text() + "TODO\n")
    with pytest.raises(TrainerError, match="TODO"):
        suite_draft(evals, tool.draft_tool())


def test_more_tests_than_the_runner_takes_are_refused_before_signing(tmp_path: Path) -> None:
    tool = extension_tool(EXAMPLE)
    evals = tmp_path / "evals"
    for index in range(9):
        shutil.copytree(EXAMPLE / "evals" / "greeting", evals / f"greeting-{index}")
    drafted = suite_draft(evals, tool.draft_tool())
    assert len(drafted.draft.cases) == 9
    with pytest.raises(
        TrainerError, match=r"limit_exceeded: input\.draft\.cases: the hosted runner runs at most 8 tests"
    ):
        run_input(drafted.draft, subject=tool.definition)


def test_a_draft_file_is_checked_as_the_runner_checks_it(tmp_path: Path) -> None:
    tool = extension_tool(EXAMPLE)
    draft = suite_draft(EXAMPLE / "evals", tool.draft_tool()).draft
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(draft.to_json()))
    assert read_draft(path) == draft
    value = run_input(read_draft(path))
    assert (value.subject, value.suite, value.runs) == ("draft", "draft", 1)
    path.write_text(json.dumps({**draft.to_json(), "extra": 1}))
    with pytest.raises(TrainerError, match=r"unsupported_feature: draft\.extra"):
        read_draft(path)


def test_a_request_record_round_trips_and_an_unchecked_body_carries_its_input_as_given() -> None:
    value = run_input(suite_draft(EXAMPLE / "evals", extension_tool(EXAMPLE).draft_tool()).draft)
    body = build_request(RUNNER, value, request_id="req-1", now=1_790_000_000)
    assert (body.request, body.run, body.attempt, body.deadline) == ("req-1", "req-1", 1, 1_790_003_600)
    assert RunInput.parse(body.input) == value
    secret = SecretKey.generate()
    event = sign(secret, 25920, [["p", RUNNER]], "x", 1_790_000_000)
    request = Request(RUNNER, body, [event], event.id)
    again = Request.from_json(read(canonical(request.to_json())))
    assert (again.runner, again.body, again.events, again.accepted_event) == (RUNNER, body, [event], event.id)
    assert again.target == event.id
    assert secret.to_hex() not in json.dumps(request.to_json())
    with pytest.raises(TrainerError, match="a saved request that does not read"):
        Request.from_json({**request.to_json(), "events": [{"id": "nope"}]})
    with pytest.raises(TrainerError, match="was never sent"):
        _ = Request(RUNNER, body).target

    raw = {**value.to_json(), "runs": 4}
    unchecked = build_request(RUNNER, raw, checked=False)
    assert unchecked.input == raw
    with pytest.raises(TrainerError, match=r"limit_exceeded: input\.runs"):
        build_request(RUNNER, raw)


def _answer(result: ResultBody | None, silence: str | None = None) -> RunAnswer:
    body = build_request(RUNNER, run_input(read_draft_example()), request_id="req-1")
    event = sign(SecretKey.generate(), 25920, [["p", RUNNER]], "x", 1_790_000_000)
    answer = RunAnswer(Request(RUNNER, body, [event]))
    answer.result, answer.silence = result, silence
    return answer


def read_draft_example() -> Draft:
    return suite_draft(EXAMPLE / "evals", extension_tool(EXAMPLE).draft_tool()).draft


def test_every_ending_is_said_in_plain_words() -> None:
    binding = Binding("req-1", 1, "req-1")
    record = ArtifactRef.of_bytes(b"root", "application/json")
    endings = {
        "Refused (too_large): at most 3 runs": ResultBody.refused(binding, Code.TOO_LARGE, "at most 3 runs"),
        "The run failed (failed): the door said [red]no[/red]": ResultBody.failed(
            binding, record, "the door said [red]no[/red]"
        ),
        "Cancelled: the requester stopped the run": ResultBody.cancelled(binding, record),
        "The runner restarted during the run": ResultBody.unknown(binding, record),
    }
    for words, result in endings.items():
        out = io.StringIO()
        show_run(Console(file=out, width=200), _answer(result), None, None, 60)
        assert words in out.getvalue()
        assert "Verdict" not in out.getvalue()
    for silence, words in (
        ("worker_absent", "nothing heard from the runner"),
        ("worker_silent", "the runner went quiet"),
    ):
        out = io.StringIO()
        show_run(Console(file=out, width=200), _answer(None, silence), None, None, 60)
        assert f"{silence}: {words} within 60 s; this proves nothing about the run itself." in out.getvalue()
        assert "eval-runner trainer run --retransmit req-1" in out.getvalue()
        shown = run_json("ws://relay", _answer(None, silence), None, None, [], 60)
        assert (shown["outcome"], shown["silence"], shown["result"]) == (None, silence, None)


def test_the_live_bar_follows_only_what_was_rendered() -> None:
    out = io.StringIO()
    binding = Binding("req-1", 1, "req-1")
    accepted = AcceptedBody(
        binding, "sha256:" + "0" * 64, "sha256:" + "1" * 64, ArtifactRef.of_bytes(b"r", "x/y"), "2" * 64, 9, "3" * 64
    )
    with RunView(Console(file=out, force_terminal=True, width=100), live=True) as view:
        view.show(accepted)
        view.show(ProgressBody(binding, 0, "queued", 0, 4))
        view.show(ProgressBody(binding, 2, "running", 2, 4))
    assert "running" in out.getvalue()
    assert "2/4" in out.getvalue()
    quiet = io.StringIO()
    with RunView(Console(file=quiet), live=False) as view:
        view.show(accepted)
    assert quiet.getvalue() == ""
