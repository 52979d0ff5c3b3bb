"""The `eval-runner` command line: one argparse tree (`cli.parser.Parser`), one `register(commands)` per
command listed in `COMMANDS`, each setting `handler`, a function from the parsed arguments to the exit
code. Thin: parsing and printing only; the work lives in the packages.

Exit codes: 0 when the command did its work; 1 with one plain line on stderr when it could not; 64
(EX_USAGE) for no command, an unknown one or any wrong command line (runner.md §3); 130 when Ctrl-C
stopped `eval run`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Final

from eval_runner import __version__
from eval_runner.cli.eval_run import register as register_eval
from eval_runner.cli.ledger import register as register_ledger
from eval_runner.cli.parser import USAGE, Commands, Handler, Parser, Variable, environment
from eval_runner.cli.release import register as register_release
from eval_runner.cli.service import register_check, register_pubkey, register_serve, register_usage
from eval_runner.cli.trainer import register as register_trainer
from eval_runner.cli.verify import register as register_verify
from eval_runner.demo import demo_main

PROG: Final = "eval-runner"

DEMO_ENVIRONMENT: Final = (
    Variable("EVAL_RUNNER_STATE", "(unset: a new temporary directory)", "the demo runner's state, kept afterwards"),
    Variable("EVAL_RUNNER_TMP", "$TMPDIR, else /tmp", "where the runs' short-lived directories are made"),
    Variable("HOME", "(unset: the state directory)", "the demo runner's $HOME"),
)


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        description=(
            "The hosted eval runner: takes signed, encrypted job requests over a Nostr relay, runs an "
            "extension's test set with and without the extension in a sandbox, and answers with a verdict."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_commands("commands", "COMMAND")
    for register in COMMANDS:
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`help`, `-h`, `--help` print the usage to stdout (0); no command prints it to stderr (64); a wrong
    command line prints the usage and the error to stderr (64)."""
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
    except SystemExit as stop:  # argparse stops after --help and --version (0) and on a usage error (64)
        return stop.code if isinstance(stop.code, int) else USAGE
    handler: Handler = args.handler
    return handler(args)


def register_demo(commands: Commands) -> None:
    """`demo`: one hosted run, end to end on this computer, offline (see `eval_runner.demo`)."""
    parser = commands.add_parser(
        "demo",
        help="run the whole hosted path once on this computer, offline",
        description=(
            "Start a runner with an embedded relay, the example extension, a stand-in agent and an offline "
            "stand-in door; send it one hosted run as a trainer would; show the verdict and the report."
        ),
        epilog=environment(DEMO_ENVIRONMENT),
    )
    parser.add_argument(
        "--agent",
        metavar="KIND",
        help="run a real agent instead of the stand-in: claude-code or codex (installed by scripts/agents) or "
        "builtin, with the SKILL.md example and a stand-in door [default: the stand-in coder]",
    )
    parser.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    return demo_main(agent=args.agent)


#: Every command, in the order `--help` lists them.
COMMANDS: Final[tuple[Callable[[Commands], None], ...]] = (
    register_demo,
    register_eval,
    register_serve,
    register_check,
    register_pubkey,
    register_release,
    register_usage,
    register_ledger,
    register_trainer,
    register_verify,
)


if __name__ == "__main__":
    sys.exit(main())
