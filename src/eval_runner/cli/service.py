"""`serve`, `check`, `pubkey` and `usage`: the hosted runner's commands (runner.md §3).

The runner is configured by its environment (`service/config.py`), so each command's help lists every
variable it reads with its default. Their logic is the service's `*_main`; this module parses and hands
over. Exit codes: 0, 1 with `eval-runner: <problem>` on stderr, 64 for a wrong command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from eval_runner.cli.parser import Commands, Parser, Variable, environment, fixed_default
from eval_runner.logs import lines_to_stream
from eval_runner.service import config, settings
from eval_runner.service.check import check_main
from eval_runner.service.keyfile import pubkey_main
from eval_runner.service.serve import serve_main
from eval_runner.service.usage import By, UsageArguments, date_problem, default_directory, usage_main

STATE: Final = f"$HOME/{config.HOME_STATE}"
KEY_FILE: Final = Variable(
    "EVAL_RUNNER_KEY_FILE",
    f"(unset: <state>/{config.STATE_KEY_FILE}, or $HOME/{config.HOME_KEY_FILE} with EVAL_RUNNER_RELAY)",
    f"the runner's secret key (serve makes <state>/{config.STATE_KEY_FILE} on first start, never a named one)",
)
RELAY: Final = Variable(
    "EVAL_RUNNER_RELAY", "(unset: an embedded relay)", "the relay to listen and answer on, ws:// or wss://"
)
STATE_DIR: Final = Variable("EVAL_RUNNER_STATE", STATE, "the state directory: ledger, usage log, relay store, key")
HOME: Final = Variable("HOME", "(unset: .)", "the base of the $HOME defaults")

#: Every variable `Config.from_env` reads, in runner.md §2.1's order (a test holds this to config.py).
SERVICE_ENVIRONMENT: Final = (
    RELAY,
    Variable(
        "EVAL_RUNNER_LISTEN",
        f"{config.DEFAULT_LISTEN_HOST}:{config.DEFAULT_LISTEN_PORT}",
        "where the embedded relay listens, HOST:PORT (port 0: any free port)",
    ),
    Variable("EVAL_RUNNER_CATALOG", "(required)", "the catalog's extension directories, ':'-separated"),
    Variable("EVAL_RUNNER_CODER", "(required)", "the agent both arms run"),
    Variable(
        "EVAL_RUNNER_AGENT",
        "(unset: coder)",
        "which agent runs, KIND[:PATH]: coder, claude-code or codex (their installed binary unless a path)",
    ),
    Variable("EVAL_RUNNER_QUESTIONS", "(unset: none)", "a directory of question sets (*.json) for the agent"),
    Variable("CODER_DOOR_KEY", "(required, or CODER_AI_GATEWAY_KEY)", "the model door's key"),
    Variable("CODER_AI_GATEWAY_KEY", "(unset)", "the model door's key when CODER_DOOR_KEY is unset"),
    Variable("CODER_DOOR_URL", config.DEFAULT_DOOR_URL, "the model door"),
    Variable("CODER_MODEL", config.DEFAULT_MODEL, "the model both arms ask for"),
    Variable("TYPESAFE_API_KEY", "(unset: no decision door)", "Jev's TypeSafe door, asked last, for decision graders"),
    Variable("TYPESAFE_BASE_URL", config.TYPESAFE_DOOR, "the TypeSafe door's URL"),
    Variable(
        "AI_GATEWAY_API_KEY",
        f"(unset: the door's key when CODER_DOOR_URL is {config.GATEWAY_DOOR})",
        "Jev through the Vercel gateway, asked first",
    ),
    Variable("OPENROUTER_API_KEY", "(unset)", "Jev through OpenRouter, asked before TypeSafe"),
    Variable("EVAL_RUNNER_RUNS_PER_DAY", "(unset: no limit)", "emergency brake: runs per trainer per UTC day"),
    Variable("EVAL_RUNNER_TURNS_PER_DAY", "(unset: no limit)", "emergency brake: agent turns per UTC day, for all"),
    Variable("EVAL_RUNNER_JOBS", str(settings.DEFAULT_JOBS), "suites run at once"),
    Variable("EVAL_RUNNER_CONCURRENCY", str(settings.DEFAULT_CONCURRENCY), "runs at once in one suite, 1..8"),
    Variable("EVAL_RUNNER_RUN_DISK_MB", str(settings.DEFAULT_RUN_DISK_MIB), "what one run may write, in MiB"),
    Variable("EVAL_RUNNER_DISK_FLOOR_MB", str(settings.DEFAULT_DISK_FLOOR_MIB), "no new runs below this free, in MiB"),
    Variable(
        "EVAL_RUNNER_BLOSSOM",
        "(unset: one here beside an embedded relay, else the relay's own)",
        "the Blossom server suite and tool files are kept on, an http(s):// base URL",
    ),
    Variable("EVAL_RUNNER_BLOSSOM_AUTH", "nip98", "how uploads there are authorized: nip98 (the relay's) or bud02"),
    Variable(
        "EVAL_RUNNER_BLOSSOM_LISTEN",
        "(unset: the relay's port + 1, beside an embedded relay)",
        "where the embedded Blossom server listens, HOST:PORT (port 0: any free port)",
    ),
    Variable("EVAL_RUNNER_BUCKET", "(unset)", "a gs:// bucket for suite files; needs the next and EVAL_RUNNER_BLOSSOM"),
    Variable("EVAL_RUNNER_GCLOUD_CONFIG", "(unset)", "the gcloud configuration that may write the bucket"),
    KEY_FILE,
    STATE_DIR,
    Variable("EVAL_RUNNER_TMP", "$TMPDIR, else /tmp", "where run and staging directories are made"),
    Variable("EVAL_RUNNER_DEFAULTS_ROOT", "(unset: the package record's)", "coder-defaults' root key, 64 hex"),
    Variable("EVAL_RUNNER_DEFAULTS_DOCS", f"$HOME/{config.HOME_DEFAULTS_DOCS}", "coder-defaults' documents"),
    Variable("EVAL_RUNNER_PROBE_MS", str(config.DEFAULT_PROBE_MS), "the relay liveness probe's period, ms"),
    Variable("EVAL_RUNNER_RENEW_MS", str(config.DEFAULT_RENEW_MS), "the subscription's renewal period, ms"),
    Variable("GYM_GATES_DIR", "(unset: the gate shipped here)", "a directory holding the gate (ext-eval-v2.json)"),
    Variable("EVAL_RUNNER_METRICS_LISTEN", "(unset: off)", "where /metrics and /healthz are served, HOST:PORT"),
    Variable("EVAL_RUNNER_DATABASE", "(unset: <state>/ledger.sqlite3)", "a fleet's shared ledger, postgresql://…"),
    Variable("EVAL_RUNNER_LEASE_MS", str(config.DEFAULT_LEASE_MS), "a fleet runner's lease on its claims, ms"),
    Variable("NOTIFY_SOCKET", "(unset)", "systemd's notify socket: READY=1 and watchdog pings"),
    Variable("HOSTNAME", "(unset)", "the host; only its SHA-256 digest is recorded in reports"),
    HOME,
    Variable("TMPDIR", "/tmp", "the system's temporary directory, EVAL_RUNNER_TMP's default"),  # noqa: S108
)

ServiceMain = Callable[..., int]


def register_serve(commands: Commands) -> None:
    _service_command(
        commands,
        "serve",
        "run the hosted runner: take requests from the relay and answer them",
        "Run the hosted runner until SIGTERM or SIGINT: confinement probe, runner key, catalog, agent, state "
        "and ledger, the embedded relay when EVAL_RUNNER_RELAY is unset, then listen. Log lines go to stderr.",
        SERVICE_ENVIRONMENT,
        serve_main,
    )


def register_check(commands: Commands) -> None:
    _service_command(
        commands,
        "check",
        "validate the configuration and print what serve would run",
        "Validate the configuration and print what serve would run; runs and changes nothing. Every problem "
        "is one `eval-runner: <problem>` line on stderr (exit 1).",
        SERVICE_ENVIRONMENT,
        check_main,
    )


def register_pubkey(commands: Commands) -> None:
    _service_command(
        commands,
        "pubkey",
        "print the runner's public key",
        "Print the runner's public key (hex), from the key file serve uses; never makes one.",
        (KEY_FILE, RELAY, STATE_DIR, HOME),
        pubkey_main,
    )


def _service_command(
    commands: Commands,
    name: str,
    summary: str,
    description: str,
    variables: tuple[Variable, ...],
    main: ServiceMain,
) -> None:
    parser = commands.add_parser(name, help=summary, description=description, epilog=environment(variables))

    def run(_: argparse.Namespace) -> int:
        return _logged(lambda: main(stdout=sys.stdout, stderr=sys.stderr, environ=os.environ))

    parser.set_defaults(handler=run)


def register_usage(commands: Commands) -> None:
    """`usage [--since YYYY-MM-DD] [--by WORD] [--json] [--dir DIR]` (runner.md §3.5)."""
    words = "|".join(by.value for by in By)
    parser: Parser = commands.add_parser(
        "usage",
        help="the usage log by day, key, action, subject or outcome",
        description="Count the requests the runner answered, grouped by day, key, action, subject or outcome, "
        "from its usage log; needs no key or catalog. With EVAL_RUNNER_DATABASE set (and no --dir), every "
        "runner's lines in the fleet's database.",
        epilog=environment(
            (STATE_DIR, HOME, Variable("EVAL_RUNNER_DATABASE", "(unset: the directory)", "a fleet's usage lines"))
        ),
    )
    parser.add_argument(
        "--since", metavar="YYYY-MM-DD", type=_day, help="count days from this one (UTC) " + fixed_default("every day")
    )
    parser.add_argument("--by", metavar=words, type=_by, default=By.DAY, help="group by " + fixed_default("day"))
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON array instead of a table")
    parser.add_argument(
        "--dir",
        metavar="DIR",
        type=Path,
        help="the usage log's directory " + fixed_default(f"$EVAL_RUNNER_STATE/usage, else {STATE}/usage"),
    )

    def run(args: argparse.Namespace) -> int:
        directory = args.dir if args.dir is not None else default_directory(os.environ)
        # A fleet's usage lines are rows of its database (every runner's), unless a directory is named.
        database = (os.environ.get("EVAL_RUNNER_DATABASE") or None) if args.dir is None else None
        arguments = UsageArguments(since=args.since, by=args.by, json=args.json, directory=directory, database=database)
        return _logged(lambda: usage_main(arguments, stdout=sys.stdout, stderr=sys.stderr))

    parser.set_defaults(handler=run)


def _logged(command: Callable[[], int]) -> int:
    with lines_to_stream(sys.stderr):  # the service's log lines: one each on stderr (eval_runner.logs)
        return int(command())


def _day(text: str) -> str:
    problem = date_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _by(word: str) -> By:
    try:
        return By(word)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be key, action, subject, day or outcome, not {word!r}") from None
