"""`eval-runner ledger export|import`: move a runner's SQLite ledger into the PostgreSQL a fleet shares.

`export` writes the stopped runner's ledger (`$EVAL_RUNNER_STATE/ledger.sqlite3`) as JSON lines to
stdout or `--out`; `import` reads them from a file or stdin into `$EVAL_RUNNER_DATABASE`, all or nothing.
The work is `service.ledger.transfer`'s; the database URL is never printed (it may hold a password).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Final, TextIO

from eval_runner.cli.parser import Commands, Parser, Variable, environment, fixed_default
from eval_runner.cli.service import HOME, STATE_DIR
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.store import ledger_path
from eval_runner.service.ledger.transfer import export_file, import_lines
from eval_runner.service.settings import UNREADABLE_DATABASE, database_parts
from eval_runner.service.usage import default_directory

DATABASE: Final = Variable("EVAL_RUNNER_DATABASE", "(required)", "the fleet's PostgreSQL, postgresql://…")


def _state() -> Path:
    return default_directory(os.environ).parent


def register(commands: Commands) -> None:
    """`ledger export [--out FILE]` and `ledger import [FILE]`."""
    parser: Parser = commands.add_parser(
        "ledger",
        help="move a runner's SQLite ledger into a fleet's PostgreSQL",
        description="Export a stopped runner's SQLite ledger as JSON lines, and import them into the PostgreSQL "
        "database several runners share (EVAL_RUNNER_DATABASE).",
    )
    actions = parser.add_commands("actions", "ACTION")
    export = actions.add_parser(
        "export",
        help="write the state's SQLite ledger as JSON lines",
        description="Write every row of the state's SQLite ledger as JSON lines; refused while a runner has it open.",
        epilog=environment((STATE_DIR, HOME)),
    )
    export.add_argument("--out", metavar="FILE", type=Path, help="write here " + fixed_default("stdout"))
    export.set_defaults(handler=_export)
    load = actions.add_parser(
        "import",
        help="write an export into EVAL_RUNNER_DATABASE, all or nothing",
        description="Write an export into the PostgreSQL database in one transaction; refused whole when a claim "
        "in it is already there. Open claims are recovered by the first runner that connects.",
        epilog=environment((DATABASE, STATE_DIR)),
    )
    load.add_argument("file", metavar="FILE", nargs="?", type=Path, help="the export " + fixed_default("stdin"))
    load.set_defaults(handler=_import)


def _export(args: argparse.Namespace) -> int:
    path = ledger_path(_state())
    try:
        if args.out is None:
            count = _write(path, sys.stdout)
        else:
            with args.out.open("x", encoding="utf-8") as out:
                count = _write(path, out)
    except (LedgerError, OSError) as error:
        print(f"eval-runner: ledger export: {error}", file=sys.stderr)
        return 1
    print(f"exported {count} rows from {path}", file=sys.stderr)
    return 0


def _write(path: Path, out: TextIO) -> int:
    count = -1
    for line in export_file(path):
        out.write(line + "\n")
        count += 1
    return count


def _import(args: argparse.Namespace) -> int:
    url = os.environ.get("EVAL_RUNNER_DATABASE", "")
    if not url.startswith(("postgresql://", "postgres://")):
        print("eval-runner: ledger import: EVAL_RUNNER_DATABASE must be a postgresql:// URL", file=sys.stderr)
        return 1
    if database_parts(url) is None:  # libpq's own error would quote the URL's parts
        print(f"eval-runner: ledger import: EVAL_RUNNER_DATABASE: {UNREADABLE_DATABASE}", file=sys.stderr)
        return 1
    try:
        if args.file is None:
            moved = import_lines(url, sys.stdin, _state())
        else:
            with args.file.open(encoding="utf-8") as source:
                moved = import_lines(url, source, _state())
    except (LedgerError, OSError) as error:
        print(f"eval-runner: ledger import: {error}", file=sys.stderr)
        return 1
    print(f"imported {moved.line()}", file=sys.stderr)
    return 0
