"""The `eval-runner` command line. Thin: parsing and printing only; the work lives in the packages.

Each command is one `register_<name>(commands)` listed in `COMMANDS`: it adds its parser to the
subcommands and sets `handler`, a function from the parsed arguments to the exit code. A command's
logic lives in its own module (`eval run`: `local_eval`), its terminal rendering in `console`.

Exit codes: 0 when the command did its work (for `eval run`: a finished suite, whatever the verdict);
1 with one plain line on stderr for bad input or a host that cannot run it; 64 (EX_USAGE) for no command,
an unknown one or a malformed command line (runner.md §3); 130 when Ctrl-C stopped a suite (its partial
report is still written and shown).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from rich.console import Console

from eval_runner import __version__
from eval_runner.cli.render import ProgressView, result_paths, show_outcome
from eval_runner.cli.trainer import register as register_trainer
from eval_runner.demo import demo_main
from eval_runner.local_eval import (
    CONCURRENCY_RANGE,
    DEFAULT_CONCURRENCY,
    DEFAULT_KEY_ENV,
    DEFAULT_OUT,
    RUNS_RANGE,
    EvalRunOptions,
    LocalEvalError,
    prepare,
    run_blocking,
    run_local,
)
from eval_runner.logs import lines_to_stream
from eval_runner.service.check import check_main
from eval_runner.service.keyfile import pubkey_main
from eval_runner.service.serve import serve_main
from eval_runner.service.usage import usage_main

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler = Callable[[argparse.Namespace], int]
PROG = "eval-runner"
STOPPED = 130
USAGE = 64


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "The hosted eval runner: takes signed, encrypted job requests over a Nostr relay, runs an "
            "extension's test set with and without the extension in a sandbox, and answers with a verdict."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for register in COMMANDS:
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit codes as runner.md §3: `help`, `-h`, `--help` print the usage to stdout (0); no command or an
    unknown one prints it to stderr (64, EX_USAGE), as does any malformed command line."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if words == ["help"]:
        parser.print_help()
        return 0
    if not words:
        parser.print_help(sys.stderr)
        return USAGE
    try:
        args = parser.parse_args(words)
    except SystemExit as stop:
        # argparse exits 0 after --help/--version and 2 on a malformed command line.
        return USAGE if stop.code not in (0, None) else 0
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return USAGE
    return handler(args)


# --- eval ------------------------------------------------------------------------------------------


def register_eval(commands: Commands) -> None:
    """`eval run EXT_DIR …`: an extension's test set in both arms, on this computer."""
    group = commands.add_parser(
        "eval", help="run an extension's test set on this computer", description="Test an extension locally."
    )
    group.set_defaults(handler=_help_of(group))
    actions = group.add_subparsers(title="eval commands", metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="run EXT_DIR's evals/ with and without the extension and print the verdict",
        description=(
            "Run the extension's evals/ test set with the extension (subject arm) and without it (baseline "
            "arm), each run in a bubblewrap sandbox, grade every run, print the verdict table and write "
            "report.json and report.html. Exits 0 on a finished run, whatever the verdict."
        ),
    )
    run.add_argument("extension", metavar="EXT_DIR", type=Path, help="the extension directory (package.json)")
    run.add_argument(
        "--runs",
        metavar="N",
        type=_bounded(*RUNS_RANGE),
        help="runs per case and arm, 1..10 (default: each case's own runs)",
    )
    run.add_argument(
        "--agent",
        metavar="PATH",
        type=Path,
        help="the agent both arms run (default: $EVAL_RUNNER_CODER, else the stand-in agent)",
    )
    run.add_argument(
        "--model", metavar="NAME", help="the model the door is asked for (default: $CODER_MODEL, else stand-in)"
    )
    run.add_argument(
        "--door-url", metavar="URL", help="a real model door (default: an offline stand-in door, started here)"
    )
    run.add_argument(
        "--door-key-env",
        metavar="NAME",
        help=f"the environment variable holding the door's key (default {DEFAULT_KEY_ENV}); never pass a key itself",
    )
    run.add_argument(
        "--concurrency",
        metavar="N",
        type=_bounded(*CONCURRENCY_RANGE),
        default=DEFAULT_CONCURRENCY,
        help=f"runs at once, 1..8 (default {DEFAULT_CONCURRENCY})",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT,
        help=f"where results directories are made (default ./{DEFAULT_OUT})",
    )
    run.set_defaults(handler=_eval_run)


def _eval_run(args: argparse.Namespace) -> int:
    options = EvalRunOptions(
        extension=args.extension,
        runs=args.runs,
        agent=args.agent,
        door_url=args.door_url,
        door_key_env=args.door_key_env,
        model=args.model,
        concurrency=args.concurrency,
        out=args.out,
    )
    err = Console(stderr=True)
    try:
        local = prepare(options, os.environ)
    except LocalEvalError as error:
        return _refused(err, error)
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
        return _refused(err, error)
    except KeyboardInterrupt:
        _say(err, "stopped; no report was written")
        return STOPPED
    show_outcome(Console(), outcome)
    for line in result_paths(outcome.results_dir):
        print(line, flush=True)
    return STOPPED if outcome.cancelled else 0


# --- the service (runner.md §3) --------------------------------------------------------------------
#
# `serve`, `check`, `pubkey` and `usage` take their arguments as the reference does: the first three ignore
# them, `usage` reads its own (`--since`, `--by`, `--json`, `--dir`; a wrong one is `eval-runner: …`, exit
# 1). So argparse hands them over raw (their parsers treat no word as an option) and never answers them
# with its own usage error; `-h` or `--help` alone prints the command's help. Exit codes: 0, or 1 with
# `eval-runner: <error>` on stderr.

ServiceMain = Callable[..., int]


def register_serve(commands: Commands) -> None:
    _service_command(
        commands, "serve", "run the hosted runner: take requests from the relay and answer them", serve_main
    )


def register_check(commands: Commands) -> None:
    _service_command(commands, "check", "validate the configuration and print what serve would run", check_main)


def register_pubkey(commands: Commands) -> None:
    _service_command(commands, "pubkey", "print the runner's public key", pubkey_main)


def register_usage(commands: Commands) -> None:
    _service_command(
        commands,
        "usage",
        "the usage log by day, key, action, subject or outcome: "
        "usage [--since YYYY-MM-DD] [--by key|action|subject|day|outcome] [--json] [--dir DIR]",
        usage_main,
    )


def _service_command(commands: Commands, name: str, summary: str, main: ServiceMain) -> None:
    parser = commands.add_parser(name, help=summary, description=summary, prefix_chars="+", add_help=False)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        if args.arguments in (["-h"], ["--help"]):
            parser.print_help()
            return 0
        with lines_to_stream(sys.stderr):  # the service's log lines: one each on stderr (eval_runner.logs)
            return int(main(list(args.arguments), stdout=sys.stdout, stderr=sys.stderr, environ=os.environ))

    parser.set_defaults(handler=run)


#: Every command, in the order `--help` lists them.
def register_demo(commands: Commands) -> None:
    """`demo`: one hosted run, end to end on this computer, offline (see `eval_runner.demo`)."""
    parser = commands.add_parser(
        "demo",
        help="run the whole hosted path once on this computer, offline",
        description=(
            "Start a runner with an embedded relay, the example extension, a stand-in agent and an offline "
            "stand-in door; send it one hosted run as a trainer would; show the verdict and the report."
        ),
    )
    parser.set_defaults(handler=lambda _args: demo_main())


COMMANDS: tuple[Callable[[Commands], None], ...] = (
    register_demo,
    register_eval,
    register_serve,
    register_check,
    register_pubkey,
    register_usage,
    register_trainer,  # trainer run|status|cancel (trainer_cli; a wrong command line there exits 64)
)


# --- small pieces ----------------------------------------------------------------------------------


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}")
        return value

    return parse


def _help_of(parser: argparse.ArgumentParser) -> Handler:
    def show(_: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    return show


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _refused(console: Console, error: LocalEvalError) -> int:
    _say(console, f"{PROG}: {error}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
