"""What every `eval-runner trainer` action shares: the relay, runner, key, kept-requests and output options, the
handler that turns errors into exit codes, the trainer's key, and plain output (`cli.trainer` and
`cli.trainer_results` register the actions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from rich.console import Console

from eval_runner.cli.destination import LOCAL_RELAY, RELAY_ENV, RUNNER_ENV
from eval_runner.cli.kept_requests import REQUESTS_DEFAULT, REQUESTS_ENV
from eval_runner.cli.parser import USAGE, Handler, Parser, UsageError, Variable, env_default, fixed_default
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.nostr import SecretKey
from eval_runner.service.config import HOME_STATE, STATE_KEY_FILE
from eval_runner.service.keyfile import KeyFileError, ensure_key, load_key
from eval_runner.trainer.client import TrainerError

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
EXIT_CODES: Final = (
    "Exit codes: 0 a completed run whose sealed report checked (whatever the verdict), a completed publish, an "
    "answered status, an acknowledged cancel; 1 a refusal, a failed, cancelled or unknown run or publish, no "
    "answer within --timeout, a relay or input that failed, a report that does not check; 64 a wrong command "
    "line."
)


def common(parser: Parser, timeout: float) -> None:
    """--relay, --runner, --key-file | --new-key, --requests, --json, --timeout."""
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
        type=seconds,
        default=timeout,
        help="how long to wait " + fixed_default(f"{timeout:g}"),
    )


def runs_per_arm(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"runs per arm is 1 to {MAX_RUNS}, not {text!r}")
    return int(text)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def handler(command: Callable[[argparse.Namespace, Console], Any]) -> Handler:
    """Run an async command; a usage error exits 64, a trainer error 1, each with one plain line."""

    def handle(args: argparse.Namespace) -> int:
        err = Console(stderr=True, highlight=False)
        try:
            code: int = asyncio.run(command(args, err))
        except UsageError as error:
            say(err, f"eval-runner trainer: {error}")
            return USAGE
        except TrainerError as error:
            if args.json:
                emit({"error": error.code, "message": error.message})
            say(err, f"eval-runner trainer: {error}")
            return 1
        except KeyboardInterrupt:
            say(err, "stopped waiting; the run goes on (`eval-runner trainer cancel ID` stops it)")
            return 130
        return code

    return handle


def trainer_key(args: argparse.Namespace, err: Console) -> SecretKey:
    """The trainer's key from `--key-file`, or a new one in `--new-key` (never over an existing file)."""
    if args.new_key is not None:
        try:
            key, made = ensure_key(args.new_key)
        except KeyFileError as error:
            raise TrainerError("input", _trainer_words(error)) from None
        if not made:
            raise UsageError(f"{args.new_key} already holds a key; pass it with --key-file")
        say(err, f"made a new trainer key in {args.new_key}; its public key is {key.public_key().to_hex()}")
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


def say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def emit(value: Mapping[str, JsonValue]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()
