"""The runner's configuration, read once from its environment (runner.md §2).

Every other part of the service takes a typed `Config` instead of reading `os.environ`, so the variable
names, defaults, validation messages and the order they are checked in (an operator reads the first
failure in the journal as `eval-runner: <message>`) live here and nowhere else, and a test builds a
configuration from a plain dict.

Values are read trimmed (Unicode white space, as the reference's `str::trim`) and an empty value counts as
unset. Keys (the chat door's, Jev's doors') are held as `Secret`, which never prints; the runner's own
secret key is not read here at all, only the path of its file (`keyfile.py` loads it).

Decisions where the spec is silent or the issue differs from the reference:

- With `EVAL_RUNNER_RELAY` unset the runner serves an embedded relay on `EVAL_RUNNER_LISTEN` (default
  `127.0.0.1:7447`; port 0 allowed, for tests) instead of joining the public relay. A set relay must be a
  ws:// or wss:// URL. Both messages are ours, in the reference's shape.
- The key file (`key_file_location`): `EVAL_RUNNER_KEY_FILE` when set, never generated (a mistyped path
  must not mint a new identity); else with an external relay `$HOME/.openagents/nostr/eval-runner-key`,
  which must exist; else `<state>/runner-key`, generated on first start. `pubkey` reads the same place.
- `EVAL_RUNNER_QUESTIONS` is optional. A catalog of empty parts only (`:`) is refused like a missing one.
- Numbers parse as the reference's `str::parse::<uN>` (optional `+`, ASCII digits, u32/u64 bounds);
  values are quoted as Rust's `{:?}`. The bucket's three checks run here in the reference's order (pair,
  base, `gs://`); `EVAL_RUNNER_PROBE_MS`/`RENEW_MS` come last, as the reference reads them after the rest,
  and like every variable an empty value is unset (the reference refuses an empty period).
- `defaults_root` None means the coder-defaults package record's own root; a given one is kept lowercase.
- The decision pin names each door by kind, URL and key; decision URLs and model names belong to the
  engine's Jev doors.
- The admission switch is the name `closed` being present (a dangling symlink closes too).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from eval_runner.errors import EvalRunnerError

#: What `str::trim` strips: the Unicode White_Space property (Python's `str.strip()` also strips U+001C..1F).
WHITE_SPACE: Final = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

DEFAULT_LISTEN_HOST: Final = "127.0.0.1"
DEFAULT_LISTEN_PORT: Final = 7447
DEFAULT_DOOR_URL: Final = "https://ai-gateway.vercel.sh"
DEFAULT_MODEL: Final = "google/gemini-3.8-flash"
DEFAULT_JOBS: Final = 2
DEFAULT_CONCURRENCY: Final = 4
#: What one run may write, and the free space the state directory keeps, in MiB.
DEFAULT_RUN_DISK_MIB: Final = 1024
DEFAULT_DISK_FLOOR_MIB: Final = 1024
CONCURRENCY_RANGE: Final = range(1, 9)
DEFAULT_PROBE_MS: Final = 30_000
DEFAULT_RENEW_MS: Final = 2_700_000

#: Jev's doors (runner.md §2.2): the door URL each is named by in the `decision` line.
GATEWAY_DOOR: Final = "https://ai-gateway.vercel.sh"
OPENROUTER_DOOR: Final = "https://openrouter.ai"
TYPESAFE_DOOR: Final = "https://api.typesafe.ai"

#: Relative to `$HOME` (external relay) and to the state directory (embedded relay).
HOME_KEY_FILE: Final = Path(".openagents/nostr/eval-runner-key")
STATE_KEY_FILE: Final = "runner-key"
HOME_STATE: Final = Path(".openagents/eval-runner")
HOME_DEFAULTS_DOCS: Final = Path(".openagents/coder-defaults/documents")

_UNSIGNED: Final = re.compile(r"\+?[0-9]+")  # what Rust's `str::parse::<uN>` accepts
_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")
_U32: Final = 2**32
_U64: Final = 2**64


class ConfigError(EvalRunnerError):
    """The first variable that is missing or wrong. `str()` is exactly the operator's message."""

    message: str

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
    """An I/O error as the reference prints one: `No such file or directory (os error 2)`."""
    if error.errno is not None:
        return f"{os.strerror(error.errno)} (os error {error.errno})"
    return str(error)


def rust_debug(text: str) -> str:
    """`text` quoted as Rust's `{:?}` writes a string (the reference's messages quote values so)."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\t":
            out.append("\\t")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\0":
            out.append("\\0")
        elif _printable(char):
            out.append(char)
        else:
            out.append(f"\\u{{{ord(char):x}}}")
    out.append('"')
    return "".join(out)


def _printable(char: str) -> bool:
    category = unicodedata.category(char)
    if category[0] == "C" or category in ("Zl", "Zp", "Mn", "Me"):
        return False
    return category != "Zs" or char == " "


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
class Config:
    """Everything the runner reads at start. Build with `Config.from_env`."""

    relay: Relay
    catalog: tuple[Path, ...]
    coder: Path
    questions: Path | None
    door: ChatDoor
    decision: DecisionPin | None
    limits: Limits
    disk: Disk
    blossom: str | None
    bucket: Bucket | None
    key_file: Path
    #: True only for the embedded relay's default key file: `keyfile.ensure_key` may create it.
    key_may_be_generated: bool
    state: Path
    temp_root: Path
    #: None: the coder-defaults package record's own root key.
    defaults_root: str | None
    defaults_documents: Path
    probe_ms: int
    renew_ms: int
    gates_dir: Path | None
    notify_socket: str | None
    hostname: str | None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The configuration in `environ` (default `os.environ`); raises `ConfigError` naming the first
        variable that is missing or wrong, in runner.md §2.1's order."""
        return _read(os.environ if environ is None else environ)

    @property
    def relay_url(self) -> str:
        return self.relay.url

    @property
    def usage_dir(self) -> Path:
        return self.state / "usage"

    @property
    def quota_file(self) -> Path:
        return self.state / "quota.json"

    @property
    def closed_flag(self) -> Path:
        return self.state / "closed"

    def admission_closed(self) -> bool:
        return admission_closed(self.state)

    def secrets(self) -> tuple[str, ...]:
        """Every key this configuration holds, for scrubbing kept bytes."""
        keys = [self.door.key.expose()]
        if self.decision is not None:
            keys.extend(pin.key.expose() for pin in self.decision.doors)
        return tuple(dict.fromkeys(keys))


def admission_closed(state: Path) -> bool:
    """The admission switch (runner.md §4): `<state>/closed` present refuses every new request."""
    return os.path.lexists(state / "closed")


# --- reading ------------------------------------------------------------------------------------------


class _Environment:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def var(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None:
            return None
        value = value.strip(WHITE_SPACE)
        return value or None

    def home(self) -> Path:
        home = self._environ.get("HOME")
        return Path(".") if home is None else Path(home)

    def temp_dir(self) -> Path:
        return Path(self._environ.get("TMPDIR") or "/tmp")  # noqa: S108 - the OS default, as std::env::temp_dir


def _unsigned(text: str, bound: int) -> int | None:
    if not _UNSIGNED.fullmatch(text):
        return None
    value = int(text)
    return value if value < bound else None


def _number(env: _Environment, name: str, default: int) -> int:
    text = env.var(name)
    if text is None:
        return default
    value = _unsigned(text, _U64)
    if value is None:
        raise ConfigError(f"{name} must be a number, not {rust_debug(text)}")
    return value


def _brake(env: _Environment, name: str, bound: int) -> int | None:
    text = env.var(name)
    if text is None:
        return None
    value = _unsigned(text, bound)
    if not value:
        raise ConfigError(
            f"{name} is an emergency brake: leave it unset for no limit, or set a positive number, "
            f"not {rust_debug(text)}"
        )
    return value


def _millis(env: _Environment, name: str, default: int) -> int:
    text = env.var(name)
    if text is None:
        return default
    value = _unsigned(text, _U64)
    if not value:
        raise ConfigError(f"{name} is a positive number of milliseconds, not `{text}`")
    return value


def _relay(env: _Environment) -> Relay:
    url = env.var("EVAL_RUNNER_RELAY")
    if url is not None:
        if not _is_ws_url(url):
            raise ConfigError(f"EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not {rust_debug(url)}")
        return ExternalRelay(url)
    listen = env.var("EVAL_RUNNER_LISTEN")
    if listen is None:
        return EmbeddedRelay(DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT)
    parsed = _host_port(listen)
    if parsed is None:
        raise ConfigError(f"EVAL_RUNNER_LISTEN must be HOST:PORT, not {rust_debug(listen)}")
    return EmbeddedRelay(*parsed)


def _is_ws_url(text: str) -> bool:
    if any(char in WHITE_SPACE for char in text):
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        return False
    return parts.scheme.lower() in ("ws", "wss") and bool(parts.hostname)


def _host_port(text: str) -> tuple[str, int] | None:
    host, colon, port_text = text.rpartition(":")
    if not colon or not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65_535:
        return None
    if host.startswith("[") and host.endswith("]"):
        try:
            host = str(ipaddress.IPv6Address(host[1:-1]))
        except ValueError:
            return None
    elif not host or ":" in host or any(char in WHITE_SPACE for char in host):
        return None
    return host, int(port_text)


def _decision(env: _Environment, door: ChatDoor) -> DecisionPin | None:
    typesafe_key = env.var("TYPESAFE_API_KEY")
    if typesafe_key is None:
        return None
    typesafe_url = (env.var("TYPESAFE_BASE_URL") or TYPESAFE_DOOR).rstrip("/")
    doors: list[JevDoorPin] = []
    gateway_key = env.var("AI_GATEWAY_API_KEY")
    if gateway_key is None and door.url.rstrip("/") == GATEWAY_DOOR:
        gateway_key = door.key.expose()
    if gateway_key is not None:
        doors.append(JevDoorPin(JevDoorKind.GATEWAY, GATEWAY_DOOR, Secret(gateway_key)))
    openrouter_key = env.var("OPENROUTER_API_KEY")
    if openrouter_key is not None:
        doors.append(JevDoorPin(JevDoorKind.OPENROUTER, OPENROUTER_DOOR, Secret(openrouter_key)))
    doors.append(JevDoorPin(JevDoorKind.TYPESAFE, typesafe_url, Secret(typesafe_key)))
    return DecisionPin(tuple(doors))


def _bucket(env: _Environment, blossom: str | None) -> Bucket | None:
    url = env.var("EVAL_RUNNER_BUCKET")
    gcloud = env.var("EVAL_RUNNER_GCLOUD_CONFIG")
    if url is None and gcloud is None:
        return None
    if url is None or gcloud is None:
        raise ConfigError("EVAL_RUNNER_BUCKET and EVAL_RUNNER_GCLOUD_CONFIG go together")
    if blossom is None:
        raise ConfigError("EVAL_RUNNER_BUCKET needs EVAL_RUNNER_BLOSSOM, its public read base")
    if not url.startswith("gs://"):
        raise ConfigError(f"{url} is not a gs:// bucket")
    return Bucket(url, Path(gcloud))


def _state(env: _Environment) -> Path:
    state = env.var("EVAL_RUNNER_STATE")
    return Path(state) if state is not None else env.home() / HOME_STATE


def key_file_location(environ: Mapping[str, str]) -> tuple[Path, bool]:
    """Where the runner key is, and whether it may be generated there.

    `EVAL_RUNNER_KEY_FILE` when set (never generated: a mistyped path must not mint a new identity);
    otherwise, with an external relay, `$HOME/.openagents/nostr/eval-runner-key` (must exist); with the
    embedded relay, `<state>/runner-key`, generated on first start. `pubkey` reads the same place.
    """
    env = _Environment(environ)
    named = env.var("EVAL_RUNNER_KEY_FILE")
    if named is not None:
        return Path(named), False
    if env.var("EVAL_RUNNER_RELAY") is not None:
        return env.home() / HOME_KEY_FILE, False
    return _state(env) / STATE_KEY_FILE, True


def _read(environ: Mapping[str, str]) -> Config:
    env = _Environment(environ)
    relay = _relay(env)

    catalog_text = env.var("EVAL_RUNNER_CATALOG")
    catalog = tuple(Path(part) for part in (catalog_text or "").split(":") if part)
    if not catalog:
        raise ConfigError("EVAL_RUNNER_CATALOG names no extension directory")
    coder = env.var("EVAL_RUNNER_CODER")
    if coder is None:
        raise ConfigError("EVAL_RUNNER_CODER is not set")
    questions = env.var("EVAL_RUNNER_QUESTIONS")
    door_key = env.var("CODER_DOOR_KEY") or env.var("CODER_AI_GATEWAY_KEY")
    if door_key is None:
        raise ConfigError("no door key: set CODER_DOOR_KEY or CODER_AI_GATEWAY_KEY")
    door = ChatDoor(
        url=env.var("CODER_DOOR_URL") or DEFAULT_DOOR_URL,
        model=env.var("CODER_MODEL") or DEFAULT_MODEL,
        key=Secret(door_key),
    )
    decision = _decision(env, door)

    runs_per_trainer = _brake(env, "EVAL_RUNNER_RUNS_PER_DAY", _U32)
    turns_per_day = _brake(env, "EVAL_RUNNER_TURNS_PER_DAY", _U64)
    jobs = _number(env, "EVAL_RUNNER_JOBS", DEFAULT_JOBS)
    concurrency = _number(env, "EVAL_RUNNER_CONCURRENCY", DEFAULT_CONCURRENCY)
    if concurrency not in CONCURRENCY_RANGE:
        raise ConfigError("EVAL_RUNNER_CONCURRENCY must be from 1 to 8")
    if jobs == 0:
        raise ConfigError("EVAL_RUNNER_JOBS must be at least 1")
    limits = Limits(runs_per_trainer, turns_per_day, jobs, concurrency)
    run_disk = _number(env, "EVAL_RUNNER_RUN_DISK_MB", DEFAULT_RUN_DISK_MIB)
    if run_disk == 0:
        raise ConfigError("EVAL_RUNNER_RUN_DISK_MB must be at least 1")
    disk = Disk(run_disk << 20, _number(env, "EVAL_RUNNER_DISK_FLOOR_MB", DEFAULT_DISK_FLOOR_MIB) << 20)

    blossom = env.var("EVAL_RUNNER_BLOSSOM")
    bucket = _bucket(env, blossom)
    key_file, key_may_be_generated = key_file_location(environ)
    state = _state(env)
    temp = env.var("EVAL_RUNNER_TMP")
    temp_root = Path(temp) if temp is not None else env.temp_dir()

    defaults_root = env.var("EVAL_RUNNER_DEFAULTS_ROOT")
    if defaults_root is not None:
        if not _HEX64.fullmatch(defaults_root):
            raise ConfigError("EVAL_RUNNER_DEFAULTS_ROOT must be a 64-hex public key")
        defaults_root = defaults_root.lower()
    documents = env.var("EVAL_RUNNER_DEFAULTS_DOCS")
    defaults_documents = Path(documents) if documents is not None else env.home() / HOME_DEFAULTS_DOCS

    probe_ms = _millis(env, "EVAL_RUNNER_PROBE_MS", DEFAULT_PROBE_MS)
    renew_ms = _millis(env, "EVAL_RUNNER_RENEW_MS", DEFAULT_RENEW_MS)
    gates = env.var("GYM_GATES_DIR")

    return Config(
        relay=relay,
        catalog=catalog,
        coder=Path(coder),
        questions=Path(questions) if questions is not None else None,
        door=door,
        decision=decision,
        limits=limits,
        disk=disk,
        blossom=blossom,
        bucket=bucket,
        key_file=key_file,
        key_may_be_generated=key_may_be_generated,
        state=state,
        temp_root=temp_root,
        defaults_root=defaults_root,
        defaults_documents=defaults_documents,
        probe_ms=probe_ms,
        renew_ms=renew_ms,
        gates_dir=Path(gates) if gates is not None else None,
        notify_socket=env.var("NOTIFY_SOCKET"),
        hostname=env.var("HOSTNAME"),
    )
