"""A throwaway PostgreSQL server for the tests: Debian's binaries, a temporary data directory, a Unix socket.

The fleet ledger's contract suite runs against a real PostgreSQL, started once per test session
(`tests/conftest.py`). Nothing here touches a server the machine may already run: the cluster is made
by `initdb` in a temporary directory, listens on no TCP port (`listen_addresses=''`), only on a socket
in that directory, and is stopped and deleted after the session. When the binaries are missing and the
test runs as root with apt-get, Debian's `postgresql` package is installed first (as `scripts/bootstrap`
does for CI). `initdb` refuses to run as root, so as root the cluster belongs to the `postgres` system
user (the package creates it; made with `useradd` if missing) and its commands run through `runuser`.

Durability settings are relaxed (`fsync=off`): this cluster holds test data for one session only.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SUPERUSER: Final = "eval"
START_BOUND_SECONDS: Final = 60


class PostgresUnavailableError(Exception):
    """No PostgreSQL server could be started here; `reason` says why (the tests skip loudly with it)."""


@dataclass(frozen=True, slots=True)
class PostgresServer:
    """A running throwaway server: connect through `url(database)`; `fresh_schema` isolates one test."""

    socket_dir: Path

    def url(self, database: str = "postgres", *, schema: str | None = None) -> str:
        """A `postgresql://` URL over the Unix socket (no password: the cluster trusts local connections)."""
        url = f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}"
        if schema is not None:
            url += f"&options=-csearch_path%3D{schema}"
        return url

    def fresh_schema(self) -> str:
        """A new empty schema in the `postgres` database, and the URL whose tables land in it."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE SCHEMA {name}")
        return self.url(schema=name)


def binaries() -> Path | None:
    """The newest `/usr/lib/postgresql/<n>/bin` with `initdb` and `pg_ctl`, or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    for directory in reversed(found):
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


def _install() -> Path:
    """Install Debian's `postgresql` package (root with apt-get only); its binary directory."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PostgresUnavailableError("PostgreSQL is not installed and this is not root with apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "postgresql"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise PostgresUnavailableError(f"{' '.join(command)} failed: {done.stderr.strip()[-400:]}")
    found = binaries()
    if found is None:
        raise PostgresUnavailableError("the postgresql package installed no initdb under /usr/lib/postgresql")
    return found


def _owner() -> str | None:
    """The system user the cluster runs as when we are root (`postgres`, created if missing), else None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"], capture_output=True, text=True, check=False
        )
        if made.returncode != 0:
            raise PostgresUnavailableError(f"no postgres user and useradd failed: {made.stderr.strip()}") from None
    return "postgres"


def _run(owner: str | None, command: list[str], what: str) -> None:
    argv = command if owner is None else ["runuser", "-u", owner, "--", *command]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=START_BOUND_SECONDS)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-600:]
        raise PostgresUnavailableError(f"{what} failed ({done.returncode}): {said}")


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a throwaway server (installing PostgreSQL if needed and possible); stop and delete it after."""
    bin_dir = binaries() or _install()
    owner = _owner()
    base = Path(tempfile.mkdtemp(prefix="eval-runner-pg-"))
    data = base / "data"
    log = base / "server.log"
    started = False
    try:
        if owner is not None:
            record = pwd.getpwnam(owner)
            os.chown(base, record.pw_uid, record.pw_gid)
        _run(
            owner,
            [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"],
            "initdb",
        )
        options = f"-c listen_addresses='' -k {base} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _run(owner, [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"], "pg_ctl")
        started = True
        yield PostgresServer(base)
    finally:
        if started:
            with contextlib.suppress(PostgresUnavailableError, subprocess.TimeoutExpired):
                _run(owner, [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], "pg_ctl stop")
        shutil.rmtree(base, ignore_errors=True)
