"""`eval-runner trainer run|status|cancel`: ask a runner over a relay whether an extension helps, from a
terminal (a progress bar, then the verdict table from the sealed report) or a script (`--json`). A run may
check (`--check`) or validate (`--validates`) a published result; `publish` and `results` are
`cli.trainer_results`'s, the options every action shares `cli.trainer_options`'.

Job events are ephemeral, so every request sent is kept locally (`--requests DIR`) for status, cancel and
`--retransmit`. Which runner on which relay is `cli.destination`'s rule. Choices and exit codes:
docs/decisions.md, "The trainer client".
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from eval_runner.cli.destination import RULE, destination
from eval_runner.cli.kept_requests import keep, kept, requests_dir
from eval_runner.cli.parser import Commands, UsageError, environment, fixed_default
from eval_runner.cli.render import case_table, verdict_text
from eval_runner.cli.trainer_options import (
    CONTROL_SECONDS,
    ENVIRONMENT,
    EXIT_CODES,
    common,
    emit,
    handler,
    runs_per_arm,
    say,
    trainer_key,
)
from eval_runner.cli.trainer_results import register as register_results
from eval_runner.contracts.answers import AcceptedBody, Answer, CancelResult, ProgressBody, ResultBody, StatusResult
from eval_runner.contracts.hosted import RunInput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.report import view as words
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.view import ArmCell, CaseView, ReportView, view_of
from eval_runner.engine.verdict.gate import Verdict
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
from eval_runner.trainer.requests import extension_draft


def register(commands: Commands) -> None:
    """Add `trainer run|status|cancel|publish|results` to the `eval-runner` subcommands (each sets `handler`)."""
    group = commands.add_parser(
        "trainer",
        help="ask a runner over a relay whether an extension helps",
        description="Send runs to a hosted eval runner, follow them, stop them, publish their results.",
    )
    actions = group.add_commands("trainer commands", "ACTION")
    run = actions.add_parser(
        "run",
        help="send a run and show its progress and verdict",
        description=(
            "Send a run of a test set against a tool and wait for the verdict, showing the runner's progress. "
            f"{RULE} {EXIT_CODES}"
        ),
        epilog=environment(ENVIRONMENT),
    )
    subject = run.add_mutually_exclusive_group()
    by_draft = fixed_default("the tool the draft names")
    subject.add_argument(
        "--subject", metavar="DEFREF", help="the catalog tool's DefinitionRef (JSON, or a file) " + by_draft
    )
    alone = "the extension directory; alone, its test set is sent (evals/, evals/evals.json or eval.yaml)"
    subject.add_argument("--extension", metavar="DIR", type=Path, help=f"{alone} {by_draft}")
    tests = run.add_mutually_exclusive_group()
    own = fixed_default("the --extension's own test set")
    tests.add_argument("--draft", metavar="FILE", type=Path, help="an openagents.eval-draft.v1 file " + own)
    tests.add_argument("--suite", metavar="DIR", type=Path, help="a local evals/ directory, sent as a draft " + own)
    tests.add_argument(
        "--suite-release",
        metavar="ID",
        help="the event id of a published test set's 3184 release (its signer is read from the relay); "
        "needs --subject or --extension " + own,
    )
    cites = run.add_mutually_exclusive_group()
    cites.add_argument(
        "--check",
        metavar="RESULT_ID",
        help="rerun a published result (3189): its own test set on its tool, unless --suite-release and "
        "--subject or --extension say otherwise " + fixed_default("not a check"),
    )
    cites.add_argument(
        "--validates",
        metavar="RESULT_ID",
        help="validate a published result with a second, published test set (--suite-release) on the tool it "
        "tested " + fixed_default("not a validation"),
    )
    run.add_argument("--runs", metavar="N", type=runs_per_arm, default=1, help="runs per arm, 1..3 " + fixed_default(1))
    run.add_argument(
        "--retransmit",
        metavar="ID",
        help="re-sign and resend a request sent earlier, unchanged " + fixed_default("a new request"),
    )
    common(run, WAIT_SECONDS)
    run.set_defaults(handler=handler(_run))
    status = actions.add_parser(
        "status",
        help="ask where a run stands",
        description=f"Ask the runner where a run sent earlier stands. {RULE} {EXIT_CODES}",
        epilog=environment(ENVIRONMENT),
    )
    status.add_argument("id", metavar="ID", help="the request id, or the id of an event that carried it")
    common(status, CONTROL_SECONDS)
    status.set_defaults(handler=handler(_status))
    cancel = actions.add_parser(
        "cancel",
        help="stop a run",
        description=f"Ask the runner to stop a run sent earlier. {RULE} {EXIT_CODES}",
        epilog=environment(ENVIRONMENT),
    )
    cancel.add_argument("id", metavar="ID", help="the request id, or the id of an event that carried it")
    cancel.add_argument(
        "--reason", default=CANCEL_REASON, help="why, for the runner's records " + fixed_default(CANCEL_REASON)
    )
    common(cancel, CONTROL_SECONDS)
    cancel.set_defaults(handler=handler(_cancel))
    register_results(actions)


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
        own = tool is not None and args.suite is None and tool.test_set is not None
        if evals is None and not own:
            raise UsageError(
                "say what to run: --draft FILE, --suite DIR, --suite-release ID, or --extension DIR with a test set"
            )
        if tool is None:
            raise UsageError("--suite needs --subject or --extension: a draft names the tool it tests")
        if own and tool.test_set is not None:
            drafted = extension_draft(tool.test_set, tool.draft_tool(), skill_name=tool.skill_name)
        else:
            assert evals is not None
            drafted = suite_draft(evals, tool.draft_tool())
        draft, warnings = drafted.draft, list(drafted.warnings)
    return run_input(draft, subject=None if tool is None else tool.definition, runs=args.runs), warnings


def _published_tool(args: argparse.Namespace) -> CatalogTool | None:
    """The tool a run of a published test set names; a check or a validation may leave it to the result."""
    if args.draft is not None or args.suite is not None:
        raise UsageError("a check or a validation runs a published test set: --suite-release, not --draft or --suite")
    if args.validates is not None and args.suite_release is None:
        raise UsageError("--validates needs --suite-release ID: the second, published test set")
    tool = subject_tool(args)
    if tool is None and args.check is None and args.validates is None:
        raise UsageError("--suite-release needs --subject or --extension: the tool the test set runs against")
    return tool


async def published_input(trainer: Trainer, args: argparse.Namespace, tool: CatalogTool | None) -> RunInput:
    """A run of a published test set; a check's or a validation's result is read from the relay (through the
    reader checks) for what the command line leaves out: its test set (a check) and its tool."""
    cited = args.check or args.validates
    result = None if cited is None else await trainer.published_result(cited)
    if args.suite_release is not None:
        release = await trainer.suite_release(args.suite_release)
    else:
        assert result is not None  # _published_tool: without --suite-release this is a check
        release = result.suite_release
    if tool is not None:
        definition = tool.definition
    else:
        assert result is not None
        definition = result.report.subject.definition
    return published_run_input(release, definition, runs=args.runs, check=args.check, validates=args.validates)


async def _run(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where, directory = destination(args.relay, args.runner, environ), requests_dir(args, environ)
    relay, runner = where.relay, where.runner
    warnings: list[str] = []
    request: Request | None = None
    value: RunInput | None = None
    tool: CatalogTool | None = None
    if args.retransmit is not None:
        named = (args.subject, args.extension, args.draft, args.suite, args.suite_release, args.check, args.validates)
        if any(value is not None for value in named):
            raise UsageError("--retransmit sends the kept body unchanged; name no subject or tests")
        request = kept(args.retransmit, directory)
        if request.runner != runner:
            raise UsageError(f"request {request.id} went to runner {request.runner}; pass --runner {request.runner}")
    elif args.suite_release is not None or args.check is not None or args.validates is not None:
        tool = _published_tool(args)
    else:
        value, warnings = build_input(args)
    for warning in warnings:
        say(err, f"warning: {warning}")
    key = trainer_key(args, err)
    async with Trainer(relay, key, runner) as trainer:
        if request is None:
            if value is None:  # a published test set: its pointer names the release's signer, read from the relay
                value = await published_input(trainer, args, tool)
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
                emit({"error": error.code, "message": error.message, "request": request.id})
            say(err, f"eval-runner trainer: {error}; `eval-runner trainer run --retransmit {request.id}` asks again")
            return 1
        if answer.output is not None:
            request.report = answer.output.report  # what `trainer publish` names
        keep(request, directory)
        shown, report_error = await report_view(trainer, answer)
    output = answer.output
    code = 0 if output is not None and report_error is None else 1
    if args.json:
        emit(run_json(relay, answer, shown, report_error, warnings, args.timeout))
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
            say(self._console, line)
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
            lines += words.figures_lines(view)
        if report_error is not None:
            lines.append(f"The sealed report could not be read: {report_error}")
        lines.append(f"report  {output.report.digest} (sealed in {output.sealed.id})")
    if answer.conflicts:
        lines.append(f"Warning: the runner sent {len(answer.conflicts)} other, different result(s) for this request.")
    if answer.progress_stopped:
        lines.append("Progress notes arrived out of order; the bar stopped where they did.")
    for line in lines:
        say(console, line)


def run_json(
    relay: str,
    answer: RunAnswer,
    view: ReportView | None,
    report_error: str | None,
    warnings: list[str],
    timeout: float,
) -> dict[str, JsonValue]:
    """The `--json` object of `trainer run`: the request and event ids, the outcome, the result body as bound,
    headline, verdict (and its words), notes, report ref, sealed id, per-case rows, the parts that were
    stand-ins and each arm's figures (tokens, model calls, tool calls: from the report), the contiguous
    progress notes, any conflicting results and the warnings."""
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
        "figures": [] if view is None else [row.to_json() for arm in words.arms(view) for row in arm.figures],
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
    async with Trainer(where.relay, trainer_key(args, err), where.runner) as trainer:
        found = await trainer.status(request.target, request.body, timeout=args.timeout)
    if args.json:
        emit({"request": request.id, "event": request.target, "answer": found.to_json()})
    elif isinstance(found, StatusResult):
        outcome = "" if found.outcome is None else f", outcome {found.outcome}"
        say(Console(highlight=False), f"request {request.id}: {found.state}{outcome}")
    else:
        say(Console(highlight=False), f"Refused ({found.code}): {found.message}")
    return 0 if isinstance(found, StatusResult) else 1


async def _cancel(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where = destination(args.relay, args.runner, environ)
    request = kept(args.id, requests_dir(args, environ))
    result: ResultBody | None = None
    async with Trainer(where.relay, trainer_key(args, err), where.runner) as trainer:
        answer = await trainer.listen(request)
        found = await trainer.cancel(request.target, request.body, reason=args.reason, timeout=args.timeout)
        if isinstance(found, CancelResult) and found.outcome is None:
            await trainer.wait(answer, args.timeout)
            result = answer.result
    acknowledged = isinstance(found, CancelResult)
    if args.json:
        emit(
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
        say(Console(highlight=False), f"request {request.id}: the runner took the cancel{tail}")
    else:
        assert isinstance(found, ResultBody)
        say(Console(highlight=False), f"Refused ({found.code}): {found.message}")
    return 0 if acknowledged else 1
