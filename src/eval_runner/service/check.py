"""`eval-runner check`: validate the configuration and print what `serve` would run (runner.md §3.2).

It runs nothing and changes nothing (never the ledger, the relay's store, the quota or the usage log: a check
beside a live runner must not settle that runner's claims), and it names every problem it finds, not only the
first, so one run of `check` is enough to fix a configuration. In a fleet (`EVAL_RUNNER_DATABASE`) the
ledger, the brake's counts and the usage lines are the database's, so `check` names the database (never
its password) where a lone runner's `usage` line names its state directory.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import TextIO

from eval_runner.contracts.hosted import RUNNER
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.service.config import Config, ConfigError
from eval_runner.service.keyfile import KeyFileError, load_key
from eval_runner.service.serve import ServeError, agent_digest, blobs_text, load_catalog, sandbox_text
from eval_runner.service.settings import UNREADABLE_DATABASE, EmbeddedRelay, database_parts

CLOSED_HINT = "admission closed (remove the closed file to open it)"
#: What `check` says of a database URL it cannot name without risking part of a password.


class CheckError(ServeError):
    """What would stop `serve`: every problem found, in the order `serve` meets them; `str()` is the first."""

    problems: tuple[str, ...]

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(problems[0])
        self.problems = tuple(problems)


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


def database_text(url: str) -> str:
    """The ledger database as an operator recognises it, `postgresql://user@host:port/dbname`, read the way
    the connection reads it (libpq's rules, so a `?host=` socket directory counts): never the password, nor
    any other parameter (`?password=` is one). A URL whose parts hold an `@` (an unescaped password's
    characters taken as a host or database name) is not named at all."""
    parts = database_parts(url)
    if parts is None:
        return UNREADABLE_DATABASE
    user, host, port, dbname = (parts.get(name, "") for name in ("user", "host", "port", "dbname"))
    login = f"{user}@" if user else ""
    if host.startswith("/"):  # a socket directory
        return f"postgresql://{login}/{dbname}?host={host}" + (f"&port={port}" if port else "")
    hosts = host.split(",")
    ports = port.split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports  # one port for every host, as libpq reads it
    where = ",".join(
        (f"[{name}]" if ":" in name else name) + (f":{number}" if number else "")
        for name, number in zip(hosts, ports, strict=False)
    )
    return f"postgresql://{login}{where}/{dbname}"


def usage_text(config: Config) -> str:
    """Where the usage log is: the state directory's `usage`, or a fleet's ledger database."""
    if config.database is None:
        return str(config.usage_dir)
    return f"the ledger database {database_text(config.database.expose())} (every runner of the fleet)"


def check_lines(config: Config, catalog: Catalog, digest: str, confinement: Confinement) -> list[str]:
    """Everything after the runner lines."""
    relay = config.relay
    relay_text = f"embedded at {relay.url}" if isinstance(relay, EmbeddedRelay) else relay.url
    blobs = blobs_text(config)
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
        f"usage    {usage_text(config)}",
        CLOSED_HINT if config.admission_closed() else "admission open",
    ]


def check(config: Config) -> list[str]:
    """The lines `check` prints, or `CheckError` naming every problem: the host cannot confine
    (`unconfined_host: …`), the runner key, the catalog, the agent."""
    problems: list[str] = []
    confinement = asyncio.run(probe(config.temp_root))
    if isinstance(confinement, Unconfined):
        problems.append(f"unconfined_host: {confinement.reason}")
    lines: list[str] = []
    catalog: Catalog | None = None
    digest = ""
    try:
        lines = runner_lines(config)
    except ServeError as error:
        problems.append(str(error))
    try:
        catalog = load_catalog(config)
    except ServeError as error:
        problems.append(str(error))
    try:
        digest = agent_digest(config.coder)
    except ServeError as error:
        problems.append(str(error))
    if problems:
        raise CheckError(problems)
    assert catalog is not None
    assert not isinstance(confinement, Unconfined)
    return lines + check_lines(config, catalog, digest, confinement)


def check_main(*, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """`eval-runner check` (it takes no arguments): the lines on stdout and 0, or one
    `eval-runner: <problem>` line on stderr per problem and 1."""
    try:
        lines = check(Config.from_env(environ))
    except (ConfigError, CheckError) as error:
        stderr.write("".join(f"eval-runner: {problem}\n" for problem in error.problems))
        return 1
    stdout.write("".join(line + "\n" for line in lines))
    return 0
