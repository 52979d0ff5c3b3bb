"""`eval-runner release DIR…`: release each extension directory's test set as the runner (runner.md §3.4).

First every catalog tool this runner publishes (`<tool name> (tool) <release id>`), then each DIR's test set
(its `evals/` case directories, else `evals/evals.json` or a Vally `eval.yaml`: `engine/testset/formats.py`)
as the package `<runner>:<slug>-tests` (`<tool name> <runner>:<slug>-tests <release id>`), one stdout line
each as it is released, ` (already released)` at the end when the relay already held that very release. The
first failure stops the command (`eval-runner: <why>`, exit 1); no DIR is a usage error (64).

It publishes where the configuration says `serve` keeps releases: the relay and the blob store it names.
With the embedded relay and blob server (the default), those live inside a running `serve`, so that is where
this command publishes, and it refuses at once, saying so, when nothing listens there (decisions.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, TextIO

from eval_runner.cli.parser import USAGE, Commands, Parser, environment
from eval_runner.cli.service import SERVICE_ENVIRONMENT
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.catalog import resolve_extension
from eval_runner.engine.testset.foreign import FormatError
from eval_runner.engine.testset.formats import load_test_set
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.engine.testset.skills import is_skill_dir
from eval_runner.errors import EvalRunnerError
from eval_runner.logs import lines_to_stream
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobStore
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.config import Config, ConfigError
from eval_runner.service.keyfile import load_key
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import Released, ReleaseError, release_suite, suite_release
from eval_runner.service.releases.tools import ToolReleases
from eval_runner.service.serve import blob_storage, load_catalog
from eval_runner.service.settings import EmbeddedBlobs, EmbeddedRelay, os_error_text

NO_DIRECTORY: Final = "release needs at least one extension directory"
REUSED: Final = " (already released)"
GATE_FILE: Final = "ext-eval-v2.json"
EVALS_DIR: Final = "evals"
TESTS_SUFFIX: Final = "-tests"
#: How long to wait for a running `serve` to accept a connection before saying nothing listens.
LISTENING_SECONDS: Final = 5.0


class ReleaseCommandError(EvalRunnerError):
    """Why `release` stopped; `str()` is the line after `eval-runner: `."""


def register(commands: Commands) -> None:
    parser: Parser = commands.add_parser(
        "release",
        help="release extension directories' test sets (and the runner's catalog tools) as the runner",
        description=(
            "Release every catalog tool this runner publishes, then each DIR's test set (evals/, "
            "evals/evals.json or eval.yaml) as the test set "
            "<runner>:<slug>-tests: files to the blob store, then one 3184 each, signed by the runner key, "
            "printing each release's event id. A second run reuses the releases the relay holds. With the "
            "embedded relay (EVAL_RUNNER_RELAY unset) it publishes through the running `eval-runner serve` "
            "of the same configuration, which must be running."
        ),
        epilog=environment(SERVICE_ENVIRONMENT),
    )
    parser.add_argument("dirs", nargs="*", metavar="DIR", type=Path, help="an extension directory (with a test set)")

    def run(args: argparse.Namespace) -> int:
        if not args.dirs:
            parser.print_usage(sys.stderr)
            sys.stderr.write(f"{parser.prog}: error: {NO_DIRECTORY}\n")
            return USAGE
        with lines_to_stream(sys.stderr):  # the service's log lines: one each on stderr
            return release_main(args.dirs, stdout=sys.stdout, stderr=sys.stderr, environ=os.environ)

    parser.set_defaults(handler=run)


def release_main(dirs: Sequence[Path], *, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """0 when every release was made or found; 1 with `eval-runner: <why>` at the first that was not."""
    try:
        config = Config.from_env(environ)
        asyncio.run(release_all(config, dirs, lambda line: print(line, file=stdout, flush=True)))
    except ConfigError as error:
        stderr.write("".join(f"eval-runner: {problem}\n" for problem in error.problems))
        return 1
    except EvalRunnerError as error:  # a release, the key, the catalog, a directory, the store: one line each
        stderr.write(f"eval-runner: {error}\n")
        return 1
    return 0


def release_line(name: str, what: str, released: Released) -> str:
    return f"{name} {what} {released.event.id}{REUSED if released.reused else ''}"


async def release_all(config: Config, dirs: Sequence[Path], say: Callable[[str], None]) -> list[Released]:
    """The runner's tools, then each directory's test set, a line each through `say` as it is released;
    the test sets' releases, in the order of `dirs`."""
    await serving(config)
    secret = load_key(config.key_file)
    runner = secret.public_key().to_hex()
    catalog = load_catalog(config)
    gate = release_gate(config)
    relay = RelayClient(config.relay.url, secret)
    suites: list[Released] = []
    async with publishing_store(config, secret) as blobs:
        tools = ToolReleases(secret=secret, blobs=blobs, relay=relay)
        try:
            catalog_releases = await tools.release_catalog(catalog.tools)
        except ReleaseError as error:
            raise ReleaseCommandError(f"tools not released: {error}") from None
        for tool, released in catalog_releases:
            say(release_line(tool.name, "(tool)", released))
        for root in dirs:
            tool = resolve_extension(root)
            package = f"{tool.package.slug}{TESTS_SUFFIX}"
            try:
                # In whichever format the directory holds it, as `eval run` and `trainer run` read it.
                suite = load_test_set(root, skill_name=tool.name if is_skill_dir(root) else None).suite
            except FormatError as error:
                raise ReleaseCommandError(f"{root}: {error}") from None
            except TestSetError as error:
                raise ReleaseCommandError(f"{root / EVALS_DIR}: {error}") from None
            try:
                prepared = suite_release(suite, author=runner, package=package, gate_file=gate)
                released = await release_suite(prepared, secret=secret, blobs=blobs, relay=relay)
            except ReleaseError as error:
                raise ReleaseCommandError(f"{root}: {error}") from None
            say(release_line(tool.name, prepared.package, released))
            suites.append(released)
    return suites


def release_gate(config: Config) -> bytes:
    """The gate file a released suite's `acceptance` names: `$GYM_GATES_DIR/ext-eval-v2.json`, else the
    gate shipped with the engine."""
    if config.gates_dir is None:
        return gate_file()
    path = config.gates_dir / GATE_FILE
    try:
        return path.read_bytes()
    except OSError as error:
        raise ReleaseCommandError(f"GYM_GATES_DIR {path}: {os_error_text(error)}") from None


async def serving(config: Config) -> None:
    """With an embedded relay or blob server, the `serve` that holds them must be listening where the
    configuration says; a port of 0 (any free port) cannot be found from here."""
    places = []
    if isinstance(config.relay, EmbeddedRelay):
        places.append(("relay", "EVAL_RUNNER_LISTEN", config.relay.host, config.relay.port, config.relay.url))
    if isinstance(config.blobs, EmbeddedBlobs):
        blobs = config.blobs
        places.append(("blob server", "EVAL_RUNNER_BLOSSOM_LISTEN", blobs.host, blobs.port, blobs.url))
    for what, variable, host, port, url in places:
        if port == 0:
            raise ReleaseCommandError(
                f"the embedded {what} listens on any free port ({variable} names port 0), so release cannot "
                f"find the running serve; name its port"
            )
        if not await listening(host, port):
            raise ReleaseCommandError(
                f"nothing answers at {url}, the embedded {what}: release publishes through a running "
                f"`eval-runner serve` of this configuration; start it first"
            )


async def listening(host: str, port: int) -> bool:
    """Does anything accept a TCP connection at `host:port` (within `LISTENING_SECONDS`)?"""
    try:
        async with asyncio.timeout(LISTENING_SECONDS):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


@contextlib.asynccontextmanager
async def publishing_store(config: Config, secret: SecretKey) -> AsyncIterator[BlobStorage]:
    """The blob store `serve` keeps releases in: its embedded server (running, reached as a client), or
    the Blossom server or bucket the configuration names."""
    if isinstance(config.blobs, EmbeddedBlobs):
        url = config.blobs.url
        async with BlobStore([url], url, secret) as store:
            yield store
        return
    async with blob_storage(config, secret) as (store, _):
        yield store
