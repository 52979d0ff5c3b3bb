"""`eval-runner trainer publish REQUEST_ID` and `eval-runner trainer results --subject DEFREF`: make a finished
run public, and read a tool's published results.

`publish` names the run by the request id `trainer run` kept; the report it names is the one that run
returned (kept with the request, or, for a record kept before that, asked again by retransmitting the run,
which the runner answers from its ledger without running it twice). The runner releases a draft test set
first and rewrites the report to name that release, so the published report's digest can differ from the
run's; the answer carries both pointers, and `eval-runner verify` checks what was published.

`results` lists the published results of one tool grouped by the test set they ran, never ranked across test
sets (NIP-EVAL), each with the checks and validations that cite it, credited as wire.md §17 says.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from eval_runner.cli.destination import LOCAL_RELAY, RELAY_ENV, RULE, destination
from eval_runner.cli.kept_requests import keep, kept, requests_dir
from eval_runner.cli.parser import Commands, UsageError, env_default, environment, fixed_default
from eval_runner.cli.trainer_options import (
    CONTROL_SECONDS,
    ENVIRONMENT,
    EXIT_CODES,
    common,
    emit,
    handler,
    say,
    trainer_key,
)
from eval_runner.contracts.hosted import PublishInput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.nostr import SecretKey
from eval_runner.reader.listing import RESULTS_LIMIT, Entry, Listing, list_results
from eval_runner.reader.verify import ReaderError
from eval_runner.service.relay.connection import RelayClient
from eval_runner.trainer.client import PUBLISH_SECONDS, Request, RunAnswer, Trainer, TrainerError, subject_ref

LIMIT_NOTE: Final = (
    f"Only the newest {RESULTS_LIMIT} published results on the relay were read: older ones are not listed here."
)
DIGEST_NOTE: Final = (
    "A draft test set is released first and the report rewritten to name it, so the published report's digest "
    "can differ from the run's."
)


def register(actions: Commands) -> None:
    """Add `publish` and `results` to the `trainer` actions."""
    publish = actions.add_parser(
        "publish",
        help="publish a finished run's result (3189), crediting you",
        description=(
            "Ask the runner to publish the result of a run you sent: it releases a draft test set first "
            f"(rewriting the report to name it), then signs a 3189 that credits you. {DIGEST_NOTE} A second "
            f"publish returns the same pointers and publishes nothing. {RULE} {EXIT_CODES}"
        ),
        epilog=environment(ENVIRONMENT),
    )
    publish.add_argument("id", metavar="REQUEST_ID", help="the run's request id, as `trainer run` kept it")
    common(publish, PUBLISH_SECONDS)
    publish.set_defaults(handler=handler(_publish))
    results = actions.add_parser(
        "results",
        help="list a tool's published results by test set, with their checks and validations",
        description=(
            "Read every published result (3189) on the relay through the reader checks, keep those of the tool, "
            "and list them grouped by the test set they ran (never ranked across test sets), each with the "
            "results that check or validate it. Exit codes: 0 listed (even none); 1 the relay could not be read; "
            "64 a wrong command line."
        ),
        epilog=environment(ENVIRONMENT[:1]),
    )
    results.add_argument(
        "--subject",
        metavar="DEFREF",
        required=True,
        help="the tool's DefinitionRef (JSON, or a file) " + fixed_default("none: required"),
    )
    results.add_argument("--relay", metavar="URL", help="the relay " + env_default(RELAY_ENV, LOCAL_RELAY))
    results.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    results.set_defaults(handler=handler(_results), timeout=CONTROL_SECONDS)


# -- publish ----------------------------------------------------------------------------------------


async def _publish(args: argparse.Namespace, err: Console) -> int:
    environ = os.environ
    where, directory = destination(args.relay, args.runner, environ), requests_dir(args, environ)
    run = kept(args.id, directory)
    if isinstance(run.body.input, dict) and run.body.input.get("action") == "publish":
        raise UsageError(f"request {run.id} is a publish; name the run's request")
    if run.runner != where.runner:
        raise UsageError(f"request {run.id} went to runner {run.runner}; pass --runner {run.runner}")
    async with Trainer(where.relay, trainer_key(args, err), where.runner) as trainer:
        report = run.report
        if report is None:
            say(err, f"asking the runner again for the result of run {run.id} (it answers from its records)")
            ran = await trainer.run(run, timeout=args.timeout)
            keep(run, directory)
            if ran.output is None:
                raise TrainerError("input", f"run {run.id} has no completed result to publish ({_outcome(ran)})")
            run.report = report = ran.output.report
            keep(run, directory)
        request = trainer.request(PublishInput(report))
        keep(request, directory)
        answer = trainer.follow(request)
        try:
            await trainer.send(request)
        finally:
            keep(request, directory)
        await trainer.wait(answer, args.timeout)
        keep(request, directory)
    if args.json:
        emit(publish_json(where.relay, run, request, answer))
    else:
        show_publish(Console(highlight=False), request, answer, trainer_pubkey=trainer.pubkey)
    return 0 if answer.published is not None else 1


def _outcome(answer: RunAnswer) -> str:
    result = answer.result
    if result is None:
        return f"{answer.silence}: no answer"
    return f"{result.outcome}" + (f" {result.code}: {result.message}" if result.code else "")


def publish_json(relay: str, run: Request, request: Request, answer: RunAnswer) -> dict[str, JsonValue]:
    """The `--json` object of `trainer publish`: the run, the report named, the outcome and both pointers."""
    result, published = answer.result, answer.published
    return {
        "request": request.id,
        "run": run.id,
        "relay": relay,
        "report": None if run.report is None else run.report.to_json(),
        "outcome": None if result is None else result.outcome,
        "silence": answer.silence,
        "code": None if result is None else result.code,
        "message": None if result is None else result.message,
        "suite_release": None if published is None else published.suite_release.to_json(),
        "result": None if published is None else published.result.to_json(),
        "note": DIGEST_NOTE,
    }


def show_publish(console: Console, request: Request, answer: RunAnswer, *, trainer_pubkey: str) -> None:
    published, result = answer.published, answer.result
    if published is not None:
        lines = [
            f"Published result {published.result.id} (3189, signed by the runner {published.result.pubkey}), "
            f"crediting {trainer_pubkey}.",
            f"Test set release {published.suite_release.id} (3184, by {published.suite_release.pubkey}).",
            DIGEST_NOTE,
            f"Check it with `eval-runner verify {published.result.id}`.",
        ]
    elif result is None:
        lines = [
            f"{answer.silence}: no answer to publish request {request.id}; this proves nothing about the publish.",
            f"Retransmit with `eval-runner trainer run --retransmit {request.id}`.",
        ]
    else:
        lines = [f"The publish was {result.outcome} ({result.code}): {result.message}"]
    for line in lines:
        say(console, line)


# -- results ----------------------------------------------------------------------------------------


async def _results(args: argparse.Namespace, err: Console) -> int:
    relay = args.relay or os.environ.get(RELAY_ENV) or LOCAL_RELAY
    if not relay.startswith(("ws://", "wss://")):
        raise UsageError(f"the relay must be a ws:// or wss:// URL, not {relay!r}")
    tool = subject_ref(args.subject)
    client = RelayClient(relay, SecretKey.generate())  # a throwaway key: only for relays that ask NIP-42
    try:
        listing = await list_results(client, tool.definition)
    except ReaderError as error:
        raise TrainerError("relay", error.message) from None
    if args.json:
        emit(listing_json(listing))
    else:
        show_listing(Console(highlight=False), listing)
    return 0


def _when(at: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))


def _headline(entry: Entry) -> tuple[str, str]:
    headline = entry.result.report.ext_eval.headline
    without = "-" if headline.baseline_passed is None else f"{headline.baseline_passed}/{headline.total}"
    return f"{headline.subject_passed}/{headline.total}", without


def show_listing(console: Console, listing: Listing) -> None:
    """One table per test set (results oldest first), the citing results under each; never one ranking."""
    say(
        console,
        f"Published results of {listing.subject.id}, by test set (results of different test sets are not compared).",
    )
    if not listing.groups:
        say(console, "None on this relay.")
    for found in listing.groups:
        name = found.suite_digest if found.release is None else f"{found.release.package} {found.release.version}"
        table = Table(title=f"Test set {name}", title_justify="left")
        for column in ("result", "published", "verdict", "with", "without", "trainer"):
            table.add_column(column, overflow="fold")
        for entry in found.entries:
            result = entry.result
            with_tool, without = _headline(entry)
            trainer = entry.trainer or "(not verified)"
            table.add_row(
                result.id,
                _when(result.created_at),
                Verdict(result.report.verdict.value).word,
                with_tool,
                without,
                trainer,
            )
            for citation in entry.citations:
                credit = citation.credit
                counted = "counts" if credit.counts else "does not count"
                marker = "" if citation.result.cites is None else citation.result.cites.marker.value
                table.add_row(
                    Text(f"  {marker} {citation.result.id}", style="dim"),
                    _when(citation.result.created_at),
                    Verdict(citation.result.report.verdict.value).word,
                    "",
                    "",
                    Text(f"{credit.relation.value} ({counted}): {credit.why}"),
                )
        console.print(table)
    if listing.unreadable:
        say(console, f"{listing.unreadable} published result(s) on the relay did not pass the reader checks.")
    if listing.limit_reached:
        say(console, LIMIT_NOTE)


def listing_json(listing: Listing) -> dict[str, JsonValue]:
    """The `--json` object of `trainer results`."""

    def entry_json(entry: Entry) -> dict[str, JsonValue]:
        result = entry.result
        return {
            "id": result.id,
            "created_at": result.created_at,
            "evaluator": result.evaluator,
            "trainer": entry.trainer,
            "verdict": result.report.verdict.value,
            "headline": result.report.ext_eval.headline.to_json(),
            "cites": None if result.cites is None else {"marker": result.cites.marker.value, "id": result.cites.id},
            "cited_by": [
                {
                    "id": citation.result.id,
                    "marker": None if citation.result.cites is None else citation.result.cites.marker.value,
                    "verdict": citation.result.report.verdict.value,
                    "relation": citation.credit.relation.value,
                    "counts": citation.credit.counts,
                    "independent": citation.credit.independent,
                    "why": citation.credit.why,
                }
                for citation in entry.citations
            ],
        }

    return {
        "subject": listing.subject.to_json(),
        "unreadable": listing.unreadable,
        "limit_reached": listing.limit_reached,
        "groups": [
            {
                "suite": found.suite_digest,
                "release": None if found.release is None else found.release.pointer(),
                "package": None if found.release is None else found.release.package,
                "version": None if found.release is None else found.release.version,
                "results": [entry_json(entry) for entry in found.entries],
            }
            for found in listing.groups
        ],
    }
