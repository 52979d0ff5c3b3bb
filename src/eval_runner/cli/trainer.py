"""`eval-runner trainer run|status|cancel`: ask a runner over a relay whether an extension helps, from a
terminal (a progress bar, then the verdict table from the sealed report) or a script (`--json`).

Job events are ephemeral, so every request sent is kept locally (`--requests DIR`) for status, cancel and
`--retransmit`. Which runner on which relay is `cli.destination`'s rule. Choices and exit codes:
docs/decisions.md, "The trainer client".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from eval_runner.cli.destination import LOCAL_RELAY, RELAY_ENV, RULE, RUNNER_ENV, destination
from eval_runner.cli.kept_requests import REQUESTS_DEFAULT, REQUESTS_ENV, keep, kept, requests_dir
from eval_runner.cli.parser import (
    USAGE,
    Commands,
    Handler,
    Parser,
    UsageError,
    Variable,
    env_default,
    environment,
    fixed_default,
)
from eval_runner.cli.render import case_table, verdict_text
from eval_runner.contracts.answers import AcceptedBody, Answer, CancelResult, ProgressBody, ResultBody, StatusResult
from eval_runner.contracts.hosted import RunInput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.report import view as words
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.view import ArmCell, CaseView, ReportView, view_of
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.nostr import SecretKey
from eval_runner.service.config import HOME_STATE, STATE_KEY_FILE
from eval_runner.service.keyfile import KeyFileError, ensure_key, load_key
from eval_runner.trainer.client import (
    CANCEL_REASON,
    VERDICT_WORDS,
    WAIT_SECONDS,
    CatalogTool,
    Request,
    RunAnswer,
    Trainer,
    TrainerError,
    extension_tool,
    published_run_input,
    read_draft,
    run_input,
    subject_ref,
    suite_draft,
)

CONTROL_SECONDS: Final = 60.0
MAX_RUNS: Final = 3
ENVIRONMENT: Final = (
    Variable(RELAY_ENV, LOCAL_RELAY, "the relay, when --relay is not given"),
    Variable(RUNNER_ENV, "(unset: the runner that goes with the relay)", "the runner, when --runner is not given"),
    Variable(REQUESTS_ENV, REQUESTS_DEFAULT, "where sent requests are kept, when --requests is not given"),
    Variable("XDG_STATE_HOME", "$HOME/.local/state", "the base of the kept requests' default directory"),
    Variable("EVAL_RUNNER_KEY_FILE", "(unset)", "the local runner's key file, as for serve and pubkey"),
    Variable(
        "EVAL_RUNNER_STATE", f"$HOME/{HOME_STATE}", f"the local runner's state: its key is <state>/{STATE_KEY_FILE}"
    ),
    Variable("HOME", "(unset: .)", "the base of the $HOME defaults"),
)
_EXIT_CODES: Final = (
    "Exit codes: 0 a completed run whose sealed report checked (whatever the verdict), an answered status, an "
    "acknowledged cancel; 1 a refusal, a failed, cancelled or unknown run, no answer within --timeout, a relay "
    "or input that failed, a report that does not check; 64 a wrong command line."
)


def register(commands: Commands) -> None:
    """Add `trainer run|status|cancel` to the `eval-runner` subcommands (each sets `handler`)."""
    group = commands.add_parser(
        "trainer",
        help="ask a runner over a relay whether an extension helps",
        description="Send runs to a hosted eval runner, follow them, stop them.",
    )
    actions = group.add_commands("trainer commands", "ACTION")
    run = actions.add_parser(
        "run",
        help="send a run and show its progress and verdict",
        description=(
            "Send a run of a test set against a tool and wait for the verdict, showing the runner's progress. "
            f"{RULE} {_EXIT_CODES}"
        ),
        epilog=environment(ENVIRONMENT),
    )
    subject = run.add_mutually_exclusive_group()
    by_draft = fixed_default("the tool the draft names")
    subject.add_argument(
        "--subject", metavar="DEFREF", help="the catalog tool's DefinitionRef (JSON, or a file) " + by_draft
    )
    alone = "the extension directory; alone, its evals/ are sent"
    subject.add_argument("--extension", metavar="DIR", type=Path, help=f"{alone} {by_draft}")
    tests = run.add_mutually_exclusive_group()
    own = fixed_default("the --extension's own evals/")
    tests.add_argument("--draft", metavar="FILE", type=Path, help="an openagents.eval-draft.v1 file " + own)
    tests.add_argument("--suite", metavar="DIR", type=Path, help="a local evals/ directory, sent as a draft " + own)
    tests.add_argument(
        "--suite-release",
        metavar="ID",
        help="the event id of a published test set's 3184 release (its signer is read from the relay); "
        "needs --subject or --extension " + own,
    )
    run.add_argument("--runs", metavar="N", type=_runs, default=1, help="runs per arm, 1..3 " + fixed_default(1))
    run.add_argument(
        "--retransmit",
        metavar="ID",
        help="re-sign and resend a request sent earlier, unchanged " + fixed_default("a new request"),
    )
    _common(run, WAIT_SECONDS)
    run.set_defaults(handler=_handler(_run))
    status = actions.add_parser(
        "status",
        help="ask where a run stands",
        description=f"Ask the runner where a run sent earlier stands. {RULE} {_EXIT_CODES}",
        epilog=environment(ENVIRONMENT),
    )
    status.add_argument("id", metavar="ID", help="the request id, or the id of an event that carried it")
    _common(status, CONTROL_SECONDS)
    status.set_defaults(handler=_handler(_status))
    cancel = actions.add_parser(
        "cancel",
        help="stop a run",
        description=f"Ask the runner to stop a run sent earlier. {RULE} {_EXIT_CODES}",
        epilog=environment(ENVIRONMENT),
    )
    cancel.add_argument("id", metavar="ID", help="the request id, or the id of an event that carried it")
    cancel.add_argument(
        "--reason", default=CANCEL_REASON, help="why, for the runner's records " + fixed_default(CANCEL_REASON)
    )
    _common(cancel, CONTROL_SECONDS)
    cancel.set_defaults(handler=_handler(_cancel))


def _common(parser: Parser, timeout: float) -> None:
    parser.add_argument("--relay", metavar="URL", help="the relay " + env_default(RELAY_ENV, LOCAL_RELAY))
    parser.add_argument(
        "--runner",
        metavar="PUBKEY",
        help="the runner's key, hex or npub " + env_default(RUNNER_ENV, "the runner that goes with the relay"),
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--key-file",
        metavar="FILE",
        type=Path,
        help="the trainer's key: 64 hex or nsec, mode 0600 " + fixed_default("none: this or --new-key is needed"),
    )
    keys.add_argument(
        "--new-key",
        metavar="FILE",
        type=Path,
        help="make a new trainer key in FILE (never over a file) and use it " + fixed_default("use --key-file"),
    )
    parser.add_argument(
        "--requests",
        metavar="DIR",
        type=Path,
        help="where sent requests are kept " + env_default(REQUESTS_ENV, REQUESTS_DEFAULT),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_seconds,
        default=timeout,
        help="how long to wait " + fixed_default(f"{timeout:g}"),
    )


def _runs(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"runs per arm is 1 to {MAX_RUNS}, not {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def _handler(command: Callable[[argparse.Namespace, Console], Any]) -> Handler:
    """Run an async command; a usage error exits 64, a trainer error 1, each with one plain line."""

    def handle(args: argparse.Namespace) -> int:
        err = Console(stderr=True, highlight=False)
        try:
            code: int = asyncio.run(command(args, err))
        except UsageError as error:
            _say(err, f"eval-runner trainer: {error}")
            return USAGE
        except TrainerError as error:
            if args.json:
                _emit({"error": error.code, "message": error.message})
            _say(err, f"eval-runner trainer: {error}")
            return 1
        except KeyboardInterrupt:
            _say(err, "stopped waiting; the run goes on (`eval-runner trainer cancel ID` stops it)")
            return 130
        return code

    return handle


# -- settings ---------------------------------------------------------------------------------------


def _secret(args: argparse.Namespace, err: Console) -> SecretKey:
    """The trainer's key from `--key-file`, or a new one in `--new-key` (never over an existing file)."""
    if args.new_key is not None:
        try:
            key, made = ensure_key(args.new_key)
        except KeyFileError as error:
            raise TrainerError("input", _trainer_words(error)) from None
        if not made:
            raise UsageError(f"{args.new_key} already holds a key; pass it with --key-file")
        _say(err, f"made a new trainer key in {args.new_key}; its public key is {key.public_key().to_hex()}")
        return key
    if args.key_file is None:
        raise UsageError("say whose request this is: --key-file FILE (or --new-key FILE to make one)")
    try:
        return load_key(args.key_file)
    except KeyFileError as error:
        raise TrainerError("input", _trainer_words(error)) from None


def _trainer_words(error: KeyFileError) -> str:
    """`service.keyfile` names the runner's key; this file is the trainer's (the rules are the same)."""
    return error.message.replace("the runner key", "the trainer key", 1)


# -- run --------------------------------------------------------------------------------------------


def subject_tool(args: argparse.Namespace) -> CatalogTool | None:
    """The catalog tool `--subject` or `--extension` names, if either does."""
    if args.subject is not None:
        return subject_ref(args.subject)
    if args.extension is not None:
        return extension_tool(args.extension)
    return None


def build_input(args: argparse.Namespace) -> tuple[RunInput, list[str]]:
    """The hosted input the command line names, and warnings about what a draft leaves behind."""
    tool = subject_tool(args)
    warnings: list[str] = []
    if args.draft is not None:
        draft = read_draft(args.draft)
    else:
        evals = args.suite if args.suite is not None else None if tool is None else tool.evals
        if evals is None:
            raise UsageError(
                "say what to run: --draft FILE, --suite DIR, --suite-release ID, or --extension DIR with an evals/"
            )
        if tool is None:
            raise UsageError("--suite needs --subject or --extension: a draft names the tool it tests")
        drafted = suite_draft(evals, tool.draft_tool())
        draft, warnings = drafted.draft, list(drafted.warnings)
    return run_input(draft, subject=None if tool is None else tool.definition, runs=args.runs), warnings


async def _run(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where, directory = destination(args.relay, args.runner, environ), requests_dir(args, environ)
    relay, runner = where.relay, where.runner
    warnings: list[str] = []
    request: Request | None = None
    value: RunInput | None = None
    tool: CatalogTool | None = None
    if args.retransmit is not None:
        named = (args.subject, args.extension, args.draft, args.suite, args.suite_release)
        if any(value is not None for value in named):
            raise UsageError("--retransmit sends the kept body unchanged; name no subject or tests")
        request = kept(args.retransmit, directory)
        if request.runner != runner:
            raise UsageError(f"request {request.id} went to runner {request.runner}; pass --runner {request.runner}")
    elif args.suite_release is not None:
        tool = subject_tool(args)
        if tool is None:
            raise UsageError("--suite-release needs --subject or --extension: the tool the test set runs against")
    else:
        value, warnings = build_input(args)
    for warning in warnings:
        _say(err, f"warning: {warning}")
    secret = _secret(args, err)
    async with Trainer(relay, secret, runner) as trainer:
        if request is None:
            if value is None:  # a published test set: its pointer names the release's signer, read from the relay
                assert tool is not None
                release = await trainer.suite_release(args.suite_release)
                value = published_run_input(release, tool.definition, runs=args.runs)
            request = trainer.request(value)
        keep(request, directory)
        try:
            with RunView(err, live=not args.json) as view:
                answer = trainer.follow(request, view.show)
                view.sending(request)
                try:
                    await trainer.send(request)
                finally:
                    keep(request, directory)
                await trainer.wait(answer, args.timeout)
        except TrainerError as error:
            # The request may have gone out: say how to ask again, with the same body.
            if args.json:
                _emit({"error": error.code, "message": error.message, "request": request.id})
            _say(err, f"eval-runner trainer: {error}; `eval-runner trainer run --retransmit {request.id}` asks again")
            return 1
        keep(request, directory)
        shown, report_error = await report_view(trainer, answer)
    output = answer.output
    code = 0 if output is not None and report_error is None else 1
    if args.json:
        _emit(run_json(relay, answer, shown, report_error, warnings, args.timeout))
    else:
        show_run(Console(highlight=False), answer, shown, report_error, args.timeout)
    return code


class RunView:
    """What `trainer run` draws while it waits: a rich progress bar on a terminal, plain lines otherwise
    (a log, a pipe), nothing with `--json`. Only what the trainer rendered (bound, contiguous) shows."""

    def __init__(self, console: Console, *, live: bool) -> None:
        self._console = console
        self._quiet = not live
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        if live and console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )

    def __enter__(self) -> RunView:
        if self._bar is not None:
            self._task = self._bar.add_task("sending", total=None)
            self._bar.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def sending(self, request: Request) -> None:
        self._line(f"sending request {request.id}; waiting for the runner", "waiting")

    def show(self, answer: Answer) -> None:
        if isinstance(answer, AcceptedBody):
            self._line("accepted by the runner", "accepted")
        elif isinstance(answer, ProgressBody):
            self._line(f"{answer.status} {answer.completed}/{answer.planned}", answer.status, answer)

    def _line(self, line: str, status: str, progress: ProgressBody | None = None) -> None:
        if self._quiet:
            return
        if self._bar is None or self._task is None:
            _say(self._console, line)
        elif progress is None:
            self._bar.update(self._task, description=status)
        else:
            self._bar.update(self._task, description=status, total=progress.planned, completed=progress.completed)


def _result_words(answer: RunAnswer, timeout: float) -> list[str]:
    """What a result that is not a completed run means, in plain words (messages are display data)."""
    result = answer.result
    if result is None:
        heard = "nothing heard from the runner" if answer.silence == "worker_absent" else "the runner went quiet"
        return [
            f"{answer.silence}: {heard} within {timeout:g} s; this proves nothing about the run itself.",
            f"Retransmit with `eval-runner trainer run --retransmit {answer.request.id}`.",
        ]
    if result.outcome == "refused":
        return [f"Refused ({result.code}): {result.message}"]
    if result.outcome == "failed":
        return [f"The run failed ({result.code}): {result.message}"]
    if result.outcome == "cancelled":
        return [f"Cancelled: {result.message or 'the run was stopped'}"]
    if result.outcome == "unknown":
        return ["The runner restarted during the run: its outcome is unknown, and it will not run again."]
    return []


async def report_view(trainer: Trainer, answer: RunAnswer) -> tuple[ReportView | None, str | None]:
    """For a completed run, the view of its sealed report; else (None, None). A report that does not open
    or check gives (None, why): the result stands, but its table can't be trusted."""
    output = answer.output
    if output is None:
        return None, None
    try:
        report, _ = await trainer.fetch_report(output.sealed, output.report)
    except TrainerError as error:
        return None, error.message
    return view_of(report, notes=output.notes), None


def show_run(
    console: Console,
    answer: RunAnswer,
    view: ReportView | None,
    report_error: str | None,
    timeout: float,
    *,
    stand_ins: frozenset[StandIn] = frozenset(),
) -> None:
    """The verdict table, the verdict in words (and a warning when a part was a stand-in: the report's own
    say, or the caller's `stand_ins`), the headline, statistics, notes, time and cost; or what happened
    instead. The numbers and words are report.html's and `eval run`'s (`engine.report.view`)."""
    output = answer.output
    lines = _result_words(answer, timeout)
    if output is not None:
        verdict = Verdict(output.verdict)
        if view is not None:
            console.print(case_table(view))
        console.print(verdict_text(verdict, f"  ({output.verdict})"))
        warning = words.stand_in_line({*stand_ins, *(() if view is None else view.stand_ins)}, verdict)
        if warning is not None:
            lines.append(warning)
        if view is not None:
            lines.append(words.headline(view))
            stats = words.statistics_line(view.statistics)
            lines += [] if stats is None else [stats]
        else:
            headline = output.headline
            baseline = None if headline.baseline_passed is None else (headline.baseline_passed, headline.total)
            lines.append(
                words.headline_words(headline.subject_passed, headline.total, baseline, None, with_change=False)
            )
        lines += [f"Note: {note}" for note in output.notes]
        if view is not None:
            lines += [words.arm_line(arm) for arm in words.arms(view)]
        if report_error is not None:
            lines.append(f"The sealed report could not be read: {report_error}")
        lines.append(f"report  {output.report.digest} (sealed in {output.sealed.id})")
    if answer.conflicts:
        lines.append(f"Warning: the runner sent {len(answer.conflicts)} other, different result(s) for this request.")
    if answer.progress_stopped:
        lines.append("Progress notes arrived out of order; the bar stopped where they did.")
    for line in lines:
        _say(console, line)


def run_json(
    relay: str,
    answer: RunAnswer,
    view: ReportView | None,
    report_error: str | None,
    warnings: list[str],
    timeout: float,
) -> dict[str, JsonValue]:
    """The `--json` object of `trainer run`: the request and event ids, the outcome, the result body as bound,
    headline, verdict (and its words), notes, report ref, sealed id, per-case rows and the parts that were
    stand-ins (from the report), the contiguous progress notes, any conflicting results and the warnings."""
    result, output, request = answer.result, answer.output, answer.request
    return {
        "request": request.id,
        "event": request.target,
        "events": [event.id for event in request.events],
        "runner": request.runner,
        "relay": relay,
        "outcome": None if result is None else result.outcome,
        "silence": answer.silence,
        "timeout": timeout,
        "code": None if result is None else result.code,
        "message": None if result is None else result.message,
        "verdict": None if output is None else output.verdict,
        "verdict_words": None if output is None else VERDICT_WORDS[output.verdict],
        "headline": None if output is None else output.headline.to_json(),
        "notes": [] if output is None else list(output.notes),
        "report": None if output is None else output.report.to_json(),
        "sealed": None if output is None else output.sealed.id,
        "cases": None if view is None else [_row_json(case) for case in view.cases],
        "stand_ins": [] if view is None else [part.value for part in view.stand_ins],
        "report_error": report_error,
        "result": None if result is None else result.to_json(),
        "accepted": None if answer.accepted is None else answer.accepted.to_json(),
        "progress": [
            {"seq": note.seq, "status": note.status, "completed": note.completed, "planned": note.planned}
            for note in answer.progress
        ],
        "progress_stopped": answer.progress_stopped,
        "conflicts": [conflict.to_json() for conflict in answer.conflicts],
        "warnings": list(warnings),
    }


def _row_json(case: CaseView) -> dict[str, JsonValue]:
    def arm(cell: ArmCell | None) -> JsonValue:
        return None if cell is None else {"passed": cell.runs_passed, "runs": cell.planned}

    return {"id": case.id, "kind": case.kind, "with": arm(case.with_extension), "without": arm(case.without)}


# -- status and cancel ------------------------------------------------------------------------------


async def _status(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where = destination(args.relay, args.runner, environ)
    request = kept(args.id, requests_dir(args, environ))
    async with Trainer(where.relay, _secret(args, err), where.runner) as trainer:
        found = await trainer.status(request.target, request.body, timeout=args.timeout)
    if args.json:
        _emit({"request": request.id, "event": request.target, "answer": found.to_json()})
    elif isinstance(found, StatusResult):
        outcome = "" if found.outcome is None else f", outcome {found.outcome}"
        _say(Console(highlight=False), f"request {request.id}: {found.state}{outcome}")
    else:
        _say(Console(highlight=False), f"Refused ({found.code}): {found.message}")
    return 0 if isinstance(found, StatusResult) else 1


async def _cancel(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where = destination(args.relay, args.runner, environ)
    request = kept(args.id, requests_dir(args, environ))
    result: ResultBody | None = None
    async with Trainer(where.relay, _secret(args, err), where.runner) as trainer:
        answer = await trainer.listen(request)
        found = await trainer.cancel(request.target, request.body, reason=args.reason, timeout=args.timeout)
        if isinstance(found, CancelResult) and found.outcome is None:
            await trainer.wait(answer, args.timeout)
            result = answer.result
    acknowledged = isinstance(found, CancelResult)
    if args.json:
        _emit(
            {
                "request": request.id,
                "event": request.target,
                "answer": found.to_json(),
                "result": None if result is None else result.to_json(),
            }
        )
    elif acknowledged:
        assert isinstance(found, CancelResult)
        ended = found.outcome or (None if result is None else result.outcome)
        tail = f"; the run ended {ended}" if ended else "; the run has not said it stopped yet"
        _say(Console(highlight=False), f"request {request.id}: the runner took the cancel{tail}")
    else:
        assert isinstance(found, ResultBody)
        _say(Console(highlight=False), f"Refused ({found.code}): {found.message}")
    return 0 if acknowledged else 1


# -- output -----------------------------------------------------------------------------------------


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _emit(value: Mapping[str, JsonValue]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()
