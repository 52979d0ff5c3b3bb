"""Fixtures the whole suite shares: the throwaway PostgreSQL server, the ledger's two backends, and a world of
published results (`world`; a test module that needs another world defines its own, which pytest prefers).

The server starts once per session, and only if a test asks for it (`postgres`). When it truly cannot
start here the tests that need it skip with the reason, loudly (`-ra` prints it) — except under CI
(`CI` set) or with `EVAL_RUNNER_REQUIRE_POSTGRES=1`, where that is a failure: CI installs PostgreSQL
(`scripts/bootstrap`), so the fleet's tests must run there.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.ledger_backends import BACKENDS, LedgerBackend
from tests.support.outside_parts import unavailable
from tests.support.postgres_server import PostgresServer, PostgresUnavailableError, postgres_server
from tests.support.published_results import Published, published


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this session: temporary data directory, a Unix socket, no TCP; stopped after."""
    try:
        server = postgres_server()
        started = server.__enter__()
    except PostgresUnavailableError as error:
        reason = f"PostgreSQL could not be started for the fleet ledger's tests: {error}"
        if os.environ.get("EVAL_RUNNER_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason)
        unavailable(reason)
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(params=BACKENDS)
def ledger_backend(request: pytest.FixtureRequest) -> LedgerBackend:
    """Each ledger backend in turn: the embedded SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return LedgerBackend("sqlite")
    server: PostgresServer = request.getfixturevalue("postgres")
    return LedgerBackend("postgresql", server)


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[Published]:
    """A runner's results published on a real relay and the real embedded blob server (`published`)."""
    async with published(tmp_path) as found:
        yield found
