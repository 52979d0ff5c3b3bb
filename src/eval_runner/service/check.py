"""`eval-runner check`: validate the configuration and print what `serve` would run (runner.md §3.2).

It runs nothing and changes nothing. The reference's `check` builds the whole runner, which opens the
state directory and rewrites its ledger, marking interrupted claims unknown (a bug: a check run beside a
live runner would settle that runner's claims under it). Ours is read-only: it never opens the ledger,
the embedded relay's store, the quota or the usage log; it reads the configuration, the runner key (never
generating one), the catalog and the agent binary, and looks whether the admission switch is there. The
confinement probe needs one sandbox, whose scratch directory is made under the temp root and removed;
nothing under the state directory is touched.

Output (stdout), labels padded as the reference pads them:

    runner   <pubkey>
    warning  the app sends to <hosted runner key>; this key is another        (only when it is another)
    relay    <relay url>           (embedded: `embedded at ws://HOST:PORT`)
    blobs    <gs:// bucket, else EVAL_RUNNER_BLOSSOM, else the relay url>
    door     default/<model>
    decision <door → door → …>  or  decision none
    agent    <EVAL_RUNNER_CODER> (<sha256 digest>)
    sandbox  <backend; seccomp filter; who counts memory>
    catalog  <tool name> <definition id>      (one line per catalog tool)
    limits   <limits line>
    disk     <disk line>
    usage    <state>/usage
    admission open  |  admission closed (remove the closed file to open it)

With the embedded relay and no key generated yet, the `runner` line says so
(`runner   none yet: serve generates <path>`) and there is no warning line: `serve` would start.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import TextIO

from eval_runner.contracts.hosted import RUNNER
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.service.config import Config, ConfigError, EmbeddedRelay
from eval_runner.service.keyfile import KeyFileError, load_key
from eval_runner.service.serve import ServeError, agent_digest, load_catalog, sandbox_text

CLOSED_HINT = "admission closed (remove the closed file to open it)"


def runner_lines(config: Config) -> list[str]:
    """`runner` and, for another key than the app's, `warning`."""
    if config.key_may_be_generated and not os.path.lexists(config.key_file):
        return [f"runner   none yet: serve generates {config.key_file}"]
    try:
        runner = load_key(config.key_file).public_key().to_hex()
    except KeyFileError as error:
        raise ServeError(str(error)) from None
    lines = [f"runner   {runner}"]
    if runner != RUNNER:
        lines.append(f"warning  the app sends to {RUNNER}; this key is another")
    return lines


def check_lines(config: Config, catalog: Catalog, digest: str, confinement: Confinement) -> list[str]:
    """Everything after the runner lines."""
    relay = config.relay
    relay_text = f"embedded at {relay.url}" if isinstance(relay, EmbeddedRelay) else relay.url
    if config.bucket is not None:
        blobs = config.bucket.url
    elif config.blossom is not None:
        blobs = config.blossom
    else:
        blobs = relay.url
    decision = "none" if config.decision is None else config.decision.describe()
    return [
        f"relay    {relay_text}",
        f"blobs    {blobs}",
        f"door     {config.door.label()}",
        f"decision {decision}",
        f"agent    {config.coder} ({digest})",
        f"sandbox  {sandbox_text(confinement)}",
        *(f"catalog  {tool.name} {tool.definition.id}" for tool in catalog.tools),
        f"limits   {config.limits.line()}",
        f"disk     {config.disk.line()}",
        f"usage    {config.usage_dir}",
        CLOSED_HINT if config.admission_closed() else "admission open",
    ]


def check(config: Config) -> list[str]:
    """The lines `check` prints, or `ServeError` (`unconfined_host: …`, a key, catalog or agent error)."""
    confinement = asyncio.run(probe(config.temp_root))
    if isinstance(confinement, Unconfined):
        raise ServeError(f"unconfined_host: {confinement.reason}")
    lines = runner_lines(config)
    catalog = load_catalog(config)
    return lines + check_lines(config, catalog, agent_digest(config.coder), confinement)


def check_main(argv: list[str], *, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """`eval-runner check`: the lines on stdout and 0, or `eval-runner: <error>` on stderr and 1.
    Arguments are ignored, as the reference ignores them."""
    del argv
    try:
        lines = check(Config.from_env(environ))
    except (ConfigError, ServeError) as error:
        stderr.write(f"eval-runner: {error}\n")
        return 1
    stdout.write("".join(line + "\n" for line in lines))
    return 0
