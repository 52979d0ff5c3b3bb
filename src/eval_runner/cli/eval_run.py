"""`eval-runner eval run`: an extension's test set in both arms on this computer, for a person or a script.

A person gets a progress bar, the verdict table and the report's paths; a script or CI gets `--json` (one
object on stdout, nothing else there) and `--fail-on`, an exit code that follows the verdict. The run
itself is `local_eval`'s; this module parses and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Final

from rich.console import Console

from eval_runner.cli.parser import Commands, Variable, bounded, env_default, environment, fixed_default
from eval_runner.cli.render import ProgressView, result_paths, show_outcome
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.grade.doors import DoorApi
from eval_runner.engine.report import view as words
from eval_runner.engine.suite_run import SuiteOutcome
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.local_eval import (
    CONCURRENCY_RANGE,
    DEFAULT_CONCURRENCY,
    DEFAULT_KEY_ENV,
    DEFAULT_MODEL,
    DEFAULT_OUT,
    RUNS_RANGE,
    EvalRunOptions,
    LocalEvalError,
    prepare,
    run_blocking,
    run_local,
)
from eval_runner.service.config import GATEWAY_DOOR, TYPESAFE_DOOR

PROG: Final = "eval-runner"
STOPPED: Final = 130
FAILED: Final = 1
#: `--fail-on WORD`: the verdicts that exit 1, from worst (worse < inconclusive < better).
FAIL_ON: Final = {
    "worse": frozenset({Verdict.FAIL}),
    "inconclusive": frozenset({Verdict.FAIL, Verdict.INCONCLUSIVE}),
}

ENVIRONMENT: Final = (
    Variable("EVAL_RUNNER_CODER", "(unset: the stand-in agent)", "the agent both arms run, when --agent is not given"),
    Variable("CODER_MODEL", DEFAULT_MODEL, "the model the door is asked for, when --model is not given"),
    Variable(DEFAULT_KEY_ENV, "(unset)", "the real door's key, unless --door-key-env names another variable"),
    Variable("EVAL_RUNNER_TMP", "/tmp", "where the runs' short-lived directories are made"),  # noqa: S108 - a default shown
    Variable("TYPESAFE_API_KEY", "(unset: no decision door)", "Jev's TypeSafe door, for decision graders"),
    Variable("TYPESAFE_BASE_URL", TYPESAFE_DOOR, "the TypeSafe door's URL"),
    Variable(
        "AI_GATEWAY_API_KEY",
        f"(unset: the door's key when --door-url is {GATEWAY_DOOR})",
        "Jev through the Vercel gateway, asked first",
    ),
    Variable("OPENROUTER_API_KEY", "(unset)", "Jev through OpenRouter, asked before TypeSafe"),
)


def register(commands: Commands) -> None:
    """`eval run EXT_DIR …` under an `eval` group."""
    group = commands.add_parser(
        "eval", help="run an extension's test set on this computer", description="Test an extension locally."
    )
    actions = group.add_commands("eval commands", "ACTION")
    run = actions.add_parser(
        "run",
        help="run EXT_DIR's evals/ with and without the extension and print the verdict",
        description=(
            "Run the extension's evals/ test set with the extension (subject arm) and without it (baseline "
            "arm), each run in a bubblewrap sandbox, grade every run, print the verdict table and write "
            "report.json and report.html. With no --agent and no --door-url the agent and the model door are "
            "stand-ins, and it says so before it starts. Exit codes: 0 a finished run, whatever the verdict "
            "(unless --fail-on); 1 bad input, a host that cannot confine the runs, or the verdict --fail-on "
            "names; 64 a wrong command line; 130 stopped by Ctrl-C (the partial report is still written)."
        ),
        epilog=environment(ENVIRONMENT),
    )
    run.add_argument("extension", metavar="EXT_DIR", type=Path, help="the extension directory (package.json)")
    run.add_argument(
        "--runs",
        metavar="N",
        type=bounded(*RUNS_RANGE),
        help="runs per case and arm, 1..10 " + fixed_default("each case's own runs"),
    )
    run.add_argument(
        "--agent",
        metavar="PATH",
        type=Path,
        help="the agent both arms run " + env_default("EVAL_RUNNER_CODER", "the stand-in agent"),
    )
    run.add_argument(
        "--agent-kind",
        metavar="KIND[:PATH]",
        help="which agent --agent is: coder (the child contract), claude-code or codex (the installed one "
        "unless a path is given; needs --door-url) " + fixed_default("coder"),
    )
    run.add_argument(
        "--model", metavar="NAME", help="the model the door is asked for " + env_default("CODER_MODEL", DEFAULT_MODEL)
    )
    run.add_argument(
        "--door-url", metavar="URL", help="a real model door " + fixed_default("an offline stand-in door, started here")
    )
    run.add_argument(
        "--door-api",
        metavar="API",
        choices=tuple(api.value for api in DoorApi),
        help="the API the door speaks, which the judge graders speak to it: responses (OpenAI Responses), "
        "anthropic (Anthropic Messages) or chat (Chat Completions) "
        + fixed_default("anthropic with --agent-kind claude-code, else responses"),
    )
    run.add_argument(
        "--door-key-env",
        metavar="NAME",
        help="the environment variable holding the door's key; never pass a key itself "
        + fixed_default(DEFAULT_KEY_ENV),
    )
    run.add_argument(
        "--concurrency",
        metavar="N",
        type=bounded(*CONCURRENCY_RANGE),
        default=DEFAULT_CONCURRENCY,
        help=f"runs at once, 1..8 {fixed_default(DEFAULT_CONCURRENCY)}",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT,
        help=f"where results directories are made {fixed_default(f'./{DEFAULT_OUT}')}",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout when it ends (verdict, verdict_words, headline, headline_text, "
        "notes, stand_ins, figures, report, html, results, cancelled, fail_on, exit_code, error) and nothing else "
        "there; progress stays on stderr",
    )
    run.add_argument(
        "--fail-on",
        metavar="VERDICT",
        choices=tuple(FAIL_ON),
        help="exit 1 when the verdict is this or worse: worse (Worse), inconclusive (Worse or No clear "
        "change) " + fixed_default("exit 0 whatever the verdict"),
    )
    run.set_defaults(handler=_eval_run)


def _eval_run(args: argparse.Namespace) -> int:
    options = EvalRunOptions(
        extension=args.extension,
        runs=args.runs,
        agent=args.agent,
        agent_kind=args.agent_kind,
        door_url=args.door_url,
        door_key_env=args.door_key_env,
        door_api=args.door_api,
        model=args.model,
        concurrency=args.concurrency,
        out=args.out,
    )
    err = Console(stderr=True)
    try:
        local = prepare(options, os.environ)
    except LocalEvalError as error:
        return _refused(err, args, str(error))
    for notice in local.notices:
        _say(err, notice)
    _say(
        err,
        f"testing {local.tool.name} ({local.tool.subject.slug}): {len(local.suite.cases)} cases, {local.planned} runs, "
        f"at most {local.concurrency} at once",
    )
    try:
        with ProgressView(local.planned, err) as progress:
            outcome = run_blocking(
                lambda cancel: run_local(local, on_progress=progress, cancel=cancel),
                on_interrupt=lambda: _say(err, "stopping: no new runs start; Ctrl-C again to quit at once"),
            )
    except LocalEvalError as error:
        return _refused(err, args, str(error))
    except KeyboardInterrupt:
        return _refused(err, args, "stopped; no report was written", code=STOPPED)
    code = exit_code(outcome.built.view.verdict, cancelled=outcome.cancelled, fail_on=args.fail_on)
    if args.json:
        _emit(outcome_json(outcome, args.fail_on, code))
        return code
    show_outcome(Console(), outcome)
    for line in result_paths(outcome.results_dir):
        print(line, flush=True)
    return code


def exit_code(verdict: Verdict, *, cancelled: bool, fail_on: str | None) -> int:
    """130 for a stopped suite; 1 when the verdict is the one `--fail-on` names, or worse; else 0."""
    if cancelled:
        return STOPPED
    if fail_on is not None and verdict in FAIL_ON[fail_on]:
        return FAILED
    return 0


def outcome_json(outcome: SuiteOutcome, fail_on: str | None, code: int) -> dict[str, JsonValue]:
    """The `--json` object of a suite that ran (the same keys as `failure_json`'s)."""
    view = outcome.built.view
    return {
        "verdict": view.verdict.value,
        "verdict_words": view.verdict.word,
        "headline": {
            "subject_passed": view.subject_passed,
            "baseline_passed": view.baseline_passed,
            "total": view.total,
        },
        "headline_text": words.headline(view),
        "notes": list(view.notes),
        "stand_ins": [part.value for part in view.stand_ins],
        "figures": [row.to_json() for arm in words.arms(view) for row in arm.figures],
        "partial": view.partial,
        "report": str(outcome.results_dir / "report.json"),
        "html": str(outcome.results_dir / "report.html"),
        "results": str(outcome.results_dir),
        "cancelled": outcome.cancelled,
        "fail_on": fail_on,
        "exit_code": code,
        "error": None,
    }


def failure_json(message: str, fail_on: str | None, code: int) -> dict[str, JsonValue]:
    """The `--json` object when no report was made: every key, null, and `error` saying why."""
    keys = ("verdict", "verdict_words", "headline", "headline_text", "partial", "report", "html", "results")
    found: dict[str, JsonValue] = dict.fromkeys(keys)
    return {
        **found,
        "notes": [],
        "stand_ins": [],
        "figures": [],
        "cancelled": code == STOPPED,
        "fail_on": fail_on,
        "exit_code": code,
        "error": message,
    }


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _refused(console: Console, args: argparse.Namespace, message: str, *, code: int = FAILED) -> int:
    _say(console, message if code == STOPPED else f"{PROG}: {message}")
    if args.json:
        _emit(failure_json(message, args.fail_on, code))
    return code


def _emit(value: dict[str, JsonValue]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()
