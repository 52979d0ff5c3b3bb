"""`eval-runner verify RESULT_ID`: is a published result what it says, from a terminal (a table) or a script
(`--json`)? The reading is `reader.verify`'s; this module parses, prints and, with `--rerun`, runs the
result's test set on this computer the way `eval run` does and shows both verdicts side by side.

Exit codes: 0 every check holds; 1 a check failed (the first is named), the relay or blob store could not be
read, or the rerun could not run; 64 a wrong command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from rich.console import Console
from rich.table import Table
from rich.text import Text

from eval_runner.cli.destination import PRODUCTION_RELAY, RELAY_ENV, is_loopback, is_production
from eval_runner.cli.eval_run import ENVIRONMENT as EVAL_RUN_ENVIRONMENT
from eval_runner.cli.parser import USAGE, Commands, UsageError, Variable, env_default, environment, fixed_default
from eval_runner.cli.render import ProgressView
from eval_runner.contracts.shape import HEX64
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.suite_run import SuiteOutcome
from eval_runner.engine.testset.catalog import PACKAGE_FILE, PROGRAMS_DIR, SKILLS_DIR, CatalogError, resolve_extension
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.local_eval import DEFAULT_KEY_ENV, EvalRunOptions, LocalEvalError, prepare, run_blocking, run_local
from eval_runner.nostr import SecretKey
from eval_runner.reader.tools import tool_files
from eval_runner.reader.verify import Reader, ReaderError, Verification
from eval_runner.service.blobs import BlobStore
from eval_runner.service.blobs.client import base_from_relay
from eval_runner.service.blobs.errors import BlobError
from eval_runner.service.relay.connection import RelayClient

PROG: Final = "eval-runner verify"
#: Where the production runner's released test sets were kept before the relay took Blossom uploads.
PRODUCTION_BUCKET: Final = "https://storage.googleapis.com/openagentsgemini-eval-blobs"
DEFAULT_OUT: Final = Path("eval-results")
#: The relay, then what `--rerun` reads as `eval run` does.
ENVIRONMENT: Final = (
    Variable(RELAY_ENV, PRODUCTION_RELAY, "the relay, when --relay is not given"),
    *EVAL_RUN_ENVIRONMENT,
)
_MARK: Final = {True: ("ok", "green"), False: ("FAILED", "bold red"), None: ("not run", "dim")}


def register(commands: Commands) -> None:
    """`verify RESULT_ID …`."""
    parser = commands.add_parser(
        "verify",
        help="check a published result (3189): the reader checks, the trainer's credit, its test set",
        description=(
            "Fetch a published result from the relay and check it as a reader does (wire.md §16.3, in order), "
            "credit its trainer from the signed request it carries, find its test set's release, fetch every "
            "file of it from the blob store and check that it is the suite the report ran; say what it is to "
            "the result it cites (a check confirms or disputes, a validation is independent or not). Exit "
            "codes: 0 every check holds; 1 one failed (the first is named), or the relay, the blob store or "
            "the rerun failed; 64 a wrong command line."
        ),
        epilog=environment(ENVIRONMENT),
    )
    parser.add_argument("result", metavar="RESULT_ID", help="the published result's event id (64 hex)")
    parser.add_argument("--relay", metavar="URL", help="the relay " + env_default(RELAY_ENV, PRODUCTION_RELAY))
    parser.add_argument(
        "--blossom",
        metavar="URL",
        action="append",
        help="a blob store to read the test set from, tried in order; repeatable "
        + fixed_default(
            "the relay's own Blossom (and, beside it: a loopback relay's blob server on the next "
            f"port, the production relay's bucket {PRODUCTION_BUCKET})"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="also run the test set on this computer against the tool, as `eval run` does, and show both "
        "verdicts side by side",
    )
    parser.add_argument(
        "--extension",
        metavar="DIR",
        type=Path,
        help="--rerun: the tool's extension directory " + fixed_default("the tool's release, from the blob store"),
    )
    parser.add_argument(
        "--agent",
        metavar="PATH",
        type=Path,
        help="--rerun: the agent both arms run " + env_default("EVAL_RUNNER_CODER", "the stand-in agent"),
    )
    parser.add_argument(
        "--door-url", metavar="URL", help="--rerun: a real model door " + fixed_default("an offline stand-in door")
    )
    parser.add_argument(
        "--door-key-env",
        metavar="NAME",
        help="--rerun: the variable holding the door's key; never pass a key itself " + fixed_default(DEFAULT_KEY_ENV),
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT,
        help="--rerun: where results go " + fixed_default(DEFAULT_OUT),
    )
    parser.set_defaults(handler=lambda args: _verify(args, parser.format_usage()))


def blob_bases(relay: str, given: Sequence[str] | None) -> list[str]:
    """The blob stores to read from: those given, else the relay's own (with its usual neighbour)."""
    if given:
        return list(given)
    bases = [base_from_relay(relay)]
    if is_loopback(relay):
        parts = urlsplit(relay)
        port = parts.port
        if port is not None and 0 < port < 65_535:
            bases.insert(0, f"http://{parts.hostname}:{port + 1}")
    if is_production(relay):
        bases.append(PRODUCTION_BUCKET)
    return bases


@dataclass(frozen=True, slots=True)
class Rerun:
    """This computer's run of the result's test set: its outcome, or why it did not run."""

    outcome: SuiteOutcome | None
    error: str | None


def _verify(args: argparse.Namespace, usage: str) -> int:
    """Read and show the result; a wrong command line (a RESULT_ID that is not 64 hex too) exits 64 with the
    usage line, as argparse's own errors do."""
    err = Console(stderr=True, highlight=False)
    relay = args.relay or os.environ.get(RELAY_ENV) or PRODUCTION_RELAY
    try:
        if HEX64.fullmatch(args.result) is None:
            raise UsageError(f"RESULT_ID must be the 64-hex id of a published result (3189), not {args.result!r}")
        if not relay.startswith(("ws://", "wss://")):
            raise UsageError(f"the relay must be a ws:// or wss:// URL, not {relay!r}")
        if args.extension is not None and not args.rerun:
            raise UsageError("--extension is the tool a --rerun runs; pass --rerun too")
        bases = blob_bases(relay, args.blossom)
    except (UsageError, BlobError) as error:
        sys.stderr.write(usage)
        _say(err, f"{PROG}: error: {error}")
        return USAGE
    with tempfile.TemporaryDirectory(prefix="eval-runner-verify-") as temp:
        tool = Path(temp) / "tool"
        tool.mkdir()
        try:
            found_and_tool = asyncio.run(
                _read(relay, bases, args.result, tool, rerun=args.rerun, extension=args.extension)
            )
        except (ReaderError, BlobError) as error:
            if args.json:
                _emit({"result": args.result, "valid": None, "error": error.message})
            _say(err, f"{PROG}: {error.message}")
            return 1
        found, tool_error = found_and_tool
        rerun = None
        if tool_error is not None:  # the checks are shown; the rerun names why it could not run
            rerun = Rerun(None, tool_error)
        elif args.rerun and found.suite is not None:
            rerun = _rerun(args, tool, err)
    if args.json:
        _emit(verification_json(found, relay, bases, rerun))
    else:
        show(Console(highlight=False), found, rerun)
    return 0 if found.valid and (rerun is None or rerun.error is None) else 1


async def _read(
    relay: str, bases: list[str], result: str, tool: Path, *, rerun: bool, extension: Path | None
) -> tuple[Verification, str | None]:
    """Verify (the test set lands in `<tool>/evals`); for a rerun, put the tool's files beside it. A tool that
    cannot be had is said beside the verification (second), so its checks are still shown."""
    client = RelayClient(relay, SecretKey.generate())  # a throwaway key: only for relays that ask NIP-42
    async with BlobStore(bases) as blobs:
        reader = Reader(client, blobs)
        found = await reader.verify(result, tool)
        published = found.publication
        if rerun and found.suite is not None and published is not None:
            try:
                if extension is not None:
                    _copy_tool(extension, tool)
                elif published.subject_release is not None:
                    for path, data in (await tool_files(reader, published.subject_release)).items():
                        (tool / path).parent.mkdir(parents=True, exist_ok=True)
                        (tool / path).write_bytes(data)
                else:
                    return found, "the result's tool has no release: pass --extension DIR to --rerun"
            except (ReaderError, BlobError) as error:
                return found, error.message
    return found, None


def _copy_tool(extension: Path, tool: Path) -> None:
    """The extension's own files (its package record, programs and skills); its evals stay behind."""
    try:
        shutil.copyfile(extension / PACKAGE_FILE, tool / PACKAGE_FILE)
        for folder in (PROGRAMS_DIR, SKILLS_DIR):
            if (extension / folder).is_dir():
                shutil.copytree(extension / folder, tool / folder)
    except OSError as error:
        raise ReaderError("input", f"--extension {extension}: {error.strerror or error}") from None


def _rerun(args: argparse.Namespace, tool: Path, err: Console) -> Rerun:
    """`eval run` of the tool directory holding the result's test set, after checking it is the same tool."""
    options = EvalRunOptions(
        extension=tool, agent=args.agent, door_url=args.door_url, door_key_env=args.door_key_env, out=args.out
    )
    try:
        resolve_extension(tool)
        local = prepare(options, os.environ)
    except (LocalEvalError, CatalogError) as error:
        return Rerun(None, str(error))
    for notice in local.notices:
        _say(err, notice)
    try:
        with ProgressView(local.planned, err) as progress:
            outcome = run_blocking(lambda cancel: run_local(local, on_progress=progress, cancel=cancel))
    except LocalEvalError as error:
        return Rerun(None, str(error))
    except KeyboardInterrupt:
        return Rerun(None, "stopped")
    return Rerun(outcome, None)


# -- output -----------------------------------------------------------------------------------------


def show(console: Console, found: Verification, rerun: Rerun | None) -> None:
    """The checks as a table, then what the result says and whom it credits, and the rerun beside it."""
    table = Table(title=f"Result {found.result_id}", title_justify="left")
    table.add_column("check")
    table.add_column("")
    table.add_column("what was found", overflow="fold")
    for check in found.checks:
        mark, style = _MARK[check.passed]
        table.add_row(check.step.value, Text(mark, style=style), Text(check.detail))
    console.print(table)
    failed = found.failed
    lines = ["Valid: every check holds." if failed is None else f"Not valid: {failed.step.value} failed."]
    result = found.publication
    if result is not None:
        report = result.report
        verdict = Verdict(report.verdict.value)
        headline = report.ext_eval.headline
        lines += [
            f"Evaluator  {result.evaluator}",
            f"Trainer    {found.trainer or '(not verified)'}",
            f"Tool       {report.subject.definition.id}",
            f"Test set   {_suite_words(found)}",
            f"Verdict    {verdict.word} ({verdict.value}): with the tool {headline.subject_passed}/{headline.total}"
            + ("" if headline.baseline_passed is None else f", without {headline.baseline_passed}/{headline.total}"),
        ]
    if found.cited is not None:
        cited = found.cited
        relation = "" if cited.credit is None else f"{cited.credit.relation.value}"
        counts = "" if cited.credit is None else (" (counts)" if cited.credit.counts else " (does not count)")
        lines.append(f"Cites      {cited.marker} {cited.id}: {relation}{counts} {cited.note}".rstrip())
    for line in lines:
        _say(console, line)
    if rerun is not None:
        _show_rerun(console, found, rerun)


def _suite_words(found: Verification) -> str:
    release = found.suite_release
    digest = found.publication.report.suite.digest if found.publication is not None else ""
    return digest if release is None else f"{release.package} {release.version} ({digest})"


def _show_rerun(console: Console, found: Verification, rerun: Rerun) -> None:
    if rerun.outcome is None:
        _say(console, f"Rerun      did not run: {rerun.error}")
        return
    view = rerun.outcome.built.view
    table = Table(title="Published and on this computer", title_justify="left")
    for name in ("", "published", "this computer"):
        table.add_column(name)
    assert found.publication is not None
    report = found.publication.report
    headline = report.ext_eval.headline
    table.add_row("verdict", Verdict(report.verdict.value).word, view.verdict.word)
    table.add_row("with the tool", f"{headline.subject_passed}/{headline.total}", f"{view.subject_passed}/{view.total}")
    table.add_row(
        "without",
        "-" if headline.baseline_passed is None else f"{headline.baseline_passed}/{headline.total}",
        "-" if view.baseline_passed is None else f"{view.baseline_passed}/{view.total}",
    )
    console.print(table)
    if view.stand_ins:
        _say(console, f"This computer's run used stand-ins ({', '.join(sorted(p.value for p in view.stand_ins))}).")
    _say(console, f"report  {rerun.outcome.results_dir / 'report.json'}")


def verification_json(
    found: Verification, relay: str, bases: Sequence[str], rerun: Rerun | None
) -> dict[str, JsonValue]:
    """The `--json` object: validity, the first failure, every check, and what the result says."""
    failed = found.failed
    result = found.publication
    out: dict[str, JsonValue] = {
        "result": found.result_id,
        "relay": relay,
        "blossom": list(bases),
        "valid": found.valid,
        "failed": None if failed is None else {"check": failed.step.value, "detail": failed.detail},
        "checks": [
            {"check": check.step.value, "passed": check.passed, "detail": check.detail} for check in found.checks
        ],
        "evaluator": None if result is None else result.evaluator,
        "trainer": found.trainer,
        "subject": None if result is None else result.subject.to_json(),
        "suite": None if result is None else result.report.suite.to_json(),
        "suite_release": None if found.suite_release is None else found.suite_release.pointer(),
        "verdict": None if result is None else result.report.verdict.value,
        "headline": None if result is None else result.report.ext_eval.headline.to_json(),
        "cites": None,
        "rerun": None,
    }
    if found.cited is not None:
        credit = found.cited.credit
        out["cites"] = {
            "marker": found.cited.marker,
            "id": found.cited.id,
            "relation": None if credit is None else credit.relation.value,
            "counts": None if credit is None else credit.counts,
            "independent": None if credit is None else credit.independent,
            "note": found.cited.note,
        }
    if rerun is not None:
        view = None if rerun.outcome is None else rerun.outcome.built.view
        out["rerun"] = {
            "error": rerun.error,
            "verdict": None if view is None else view.verdict.value,
            "headline": None
            if view is None
            else {"subject_passed": view.subject_passed, "baseline_passed": view.baseline_passed, "total": view.total},
            "stand_ins": [] if view is None else sorted(part.value for part in view.stand_ins),
            "report": None if rerun.outcome is None else str(rerun.outcome.results_dir / "report.json"),
        }
    return out


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _emit(value: Mapping[str, JsonValue]) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()
