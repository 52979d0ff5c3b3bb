"""The typed pieces of the runner's configuration: where it listens and keeps blobs, its doors, its bounds.

`config` reads them from the environment; everything else takes them from a `Config`. Keys are held as
`Secret`, which never prints.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict

DEFAULT_JOBS: Final = 2
DEFAULT_CONCURRENCY: Final = 4
#: What one run may write, and the free space the state directory keeps, in MiB.
DEFAULT_RUN_DISK_MIB: Final = 1024
DEFAULT_DISK_FLOOR_MIB: Final = 1024


class Secret:
    """A key read from the environment. Never printed; `expose()` is the one way to the text."""

    __slots__ = ("_text",)

    _text: str

    def __init__(self, text: str) -> None:
        object.__setattr__(self, "_text", text)

    def expose(self) -> str:
        return self._text

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._text.encode(), other._text.encode())

    def __hash__(self) -> int:
        return hash(("Secret", self._text))

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__


def os_error_text(error: OSError) -> str:
    """An I/O error as a person reads it: the system's description (`No such file or directory`)."""
    if error.errno is not None:
        return os.strerror(error.errno)
    return str(error)


# --- typed pieces -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExternalRelay:
    """A relay elsewhere (`EVAL_RUNNER_RELAY`, a ws:// or wss:// URL) the runner listens and publishes on."""

    url: str


@dataclass(frozen=True, slots=True)
class EmbeddedRelay:
    """The relay the runner serves itself when `EVAL_RUNNER_RELAY` is unset (`EVAL_RUNNER_LISTEN`)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"


Relay = ExternalRelay | EmbeddedRelay


@dataclass(frozen=True, slots=True)
class EmbeddedBlobs:
    """The Blossom server the runner serves itself beside the embedded relay (`EVAL_RUNNER_BLOSSOM_LISTEN`)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BlossomBlobs:
    """A Blossom server elsewhere: `EVAL_RUNNER_BLOSSOM`, or else the external relay's own (wire.md §19.1).
    `auth` is how uploads are authorized there: `nip98` (the relay's variant) or `bud02` (standard Blossom)."""

    base: str
    auth: str = "nip98"


Blobs = EmbeddedBlobs | BlossomBlobs
BLOB_AUTH: Final = ("nip98", "bud02")


@dataclass(frozen=True, slots=True)
class ChatDoor:
    """The model door both arms answer through. Its name is always `default`."""

    url: str
    model: str
    key: Secret
    name: str = "default"

    def label(self) -> str:
        return f"{self.name}/{self.model}"


class JevDoorKind(StrEnum):
    GATEWAY = "gateway"
    OPENROUTER = "openrouter"
    TYPESAFE = "typesafe"


@dataclass(frozen=True, slots=True)
class JevDoorPin:
    """One of Jev's doors: which it is, the door URL the `decision` line names, and its key."""

    kind: JevDoorKind
    door: str
    key: Secret


@dataclass(frozen=True, slots=True)
class DecisionPin:
    """The decision door: Jev's doors in asking order, TypeSafe always last (runner.md §2.2)."""

    doors: tuple[JevDoorPin, ...]

    def __post_init__(self) -> None:
        if not self.doors or self.doors[-1].kind is not JevDoorKind.TYPESAFE:
            raise ValueError("a decision pin ends with its TypeSafe door")

    @property
    def typesafe(self) -> JevDoorPin:
        return self.doors[-1]

    @property
    def fallbacks(self) -> tuple[JevDoorPin, ...]:
        """The doors asked before TypeSafe; empty means TypeSafe alone, with no failover."""
        return self.doors[:-1]

    def door_urls(self) -> tuple[str, ...]:
        return tuple(pin.door for pin in self.doors)

    def describe(self) -> str:
        """The `decision` line: `https://ai-gateway.vercel.sh → https://api.typesafe.ai`."""
        return " → ".join(self.door_urls())


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds beyond a request's own. Both brakes unset (None) is the shipped default: no usage limit."""

    runs_per_trainer: int | None = None
    turns_per_day: int | None = None
    jobs: int = DEFAULT_JOBS
    concurrency: int = DEFAULT_CONCURRENCY

    @property
    def braked(self) -> bool:
        return self.runs_per_trainer is not None or self.turns_per_day is not None

    def line(self) -> str:
        """The `limits` line of `serve` and `check` (runner.md §3.1)."""
        if self.braked:
            runs = "any" if self.runs_per_trainer is None else str(self.runs_per_trainer)
            turns = "any" if self.turns_per_day is None else str(self.turns_per_day)
            brake = f"emergency brake on: {runs} runs per trainer per day, {turns} turns per day"
        else:
            brake = "no usage limit"
        return f"{brake}; {self.jobs} suites and {self.concurrency} runs at once"


@dataclass(frozen=True, slots=True)
class Disk:
    """Disk bounds: what one run may write (its sandbox's files, ended `errored(disk_limit)` beyond it),
    and the free space below which no new run is admitted, so the ledger never meets a full disk."""

    run: int = DEFAULT_RUN_DISK_MIB << 20
    floor: int = DEFAULT_DISK_FLOOR_MIB << 20

    def line(self) -> str:
        """The `disk` line of `serve` and `check`."""
        return f"each run may write {self.run >> 20} MiB; no new runs below {self.floor >> 20} MiB free"


@dataclass(frozen=True, slots=True)
class Bucket:
    """A `gs://` bucket holding suite files, and the gcloud configuration that may write it."""

    url: str
    gcloud_config: Path


@dataclass(frozen=True, slots=True)
class MetricsListen:
    """Where `/metrics` and `/healthz` are served (`EVAL_RUNNER_METRICS_LISTEN`, HOST:PORT); unset is off."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


#: Said of a ledger database URL that does not read: never the URL itself, which may hold a password.
UNREADABLE_DATABASE: Final = "a URL that does not read (percent-encode a password's special characters)"


def database_parts(url: str) -> dict[str, str] | None:
    """What libpq reads from the ledger database's `postgresql://` URL (`user`, `host`, `port`, `dbname`, …),
    or None when it does not read or an unescaped password's characters would be taken for a host, port or
    database name — then libpq's own errors would quote them, so such a URL is refused before any connection."""
    if not url.startswith(("postgresql://", "postgres://")):
        return None
    try:
        parts = {name: str(value) for name, value in conninfo_to_dict(url).items() if value is not None}
    except psycopg.Error:
        return None
    named = [parts.get(name, "") for name in ("user", "host", "port", "dbname")]
    if any("@" in part for part in named) or "/" in parts.get("dbname", "") or "/" in parts.get("port", ""):
        return None
    return parts
