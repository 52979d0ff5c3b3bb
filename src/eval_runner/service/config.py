"""The runner's configuration, read once from its environment (runner.md §2) into a typed `Config`.

Every other part of the service takes a `Config` instead of reading `os.environ`, so variable names,
defaults and messages live here alone, and a test builds a configuration from a plain dict. Reading
collects every problem it meets (`ConfigError.problems`, in runner.md §2.1's order) so `check` can name
them all at once. Keys are held as `Secret`, which never prints.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from eval_runner.engine.agents import AgentChoice, AgentChoiceError, parse_choice
from eval_runner.errors import EvalRunnerError
from eval_runner.service.settings import (
    BLOB_AUTH,
    DEFAULT_CONCURRENCY,
    DEFAULT_DISK_FLOOR_MIB,
    DEFAULT_JOBS,
    DEFAULT_RUN_DISK_MIB,
    UNREADABLE_DATABASE,
    Blobs,
    BlossomBlobs,
    Bucket,
    ChatDoor,
    DecisionPin,
    Disk,
    EmbeddedBlobs,
    EmbeddedRelay,
    ExternalRelay,
    JevDoorKind,
    JevDoorPin,
    Limits,
    MetricsListen,
    Relay,
    Secret,
    database_parts,
)

#: What `str::trim` strips: the Unicode White_Space property (Python's `str.strip()` also strips U+001C..1F).
WHITE_SPACE: Final = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

DEFAULT_LISTEN_HOST: Final = "127.0.0.1"
DEFAULT_LISTEN_PORT: Final = 7447
DEFAULT_DOOR_URL: Final = "https://ai-gateway.vercel.sh"
DEFAULT_MODEL: Final = "google/gemini-3.8-flash"
CONCURRENCY_RANGE: Final = range(1, 9)
DEFAULT_PROBE_MS: Final = 30_000
DEFAULT_RENEW_MS: Final = 2_700_000
DEFAULT_LEASE_MS: Final = 30_000

#: Jev's doors (runner.md §2.2): the door URL each is named by in the `decision` line.
GATEWAY_DOOR: Final = "https://ai-gateway.vercel.sh"
OPENROUTER_DOOR: Final = "https://openrouter.ai"
TYPESAFE_DOOR: Final = "https://api.typesafe.ai"

#: Relative to `$HOME` (external relay) and to the state directory (embedded relay).
HOME_KEY_FILE: Final = Path(".openagents/nostr/eval-runner-key")
STATE_KEY_FILE: Final = "runner-key"
HOME_STATE: Final = Path(".openagents/eval-runner")
HOME_DEFAULTS_DOCS: Final = Path(".openagents/coder-defaults/documents")

_UNSIGNED: Final = re.compile(r"\+?[0-9]+")  # an optional plus, then ASCII digits only
_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")
_U32: Final = 2**32
_U64: Final = 2**64


class ConfigError(EvalRunnerError):
    """The variables that are missing or wrong. `problems` are their messages in runner.md §2.1's order;
    `str()` is the first (the one `serve` would have stopped at)."""

    problems: tuple[str, ...]

    def __init__(self, *problems: str) -> None:
        if not problems:
            raise ValueError("a configuration error names at least one problem")
        super().__init__(problems[0])
        self.problems = problems

    @property
    def message(self) -> str:
        return self.problems[0]

    def __str__(self) -> str:
        return self.problems[0]


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
    blobs: Blobs
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
    #: The model door is a stand-in (the demo sets this; no variable can: a deployed door is real).
    stand_in_door: bool = False
    #: Where `/metrics` and `/healthz` are served (`EVAL_RUNNER_METRICS_LISTEN`); None: nowhere.
    metrics_listen: MetricsListen | None = None
    #: Which agent `coder` is (`EVAL_RUNNER_AGENT=kind[:path]`, `engine/agents`); None: the coder contract.
    agent: AgentChoice | None = None
    #: The PostgreSQL ledger a fleet shares (`EVAL_RUNNER_DATABASE`, may hold a password); None: the SQLite file.
    database: Secret | None = None
    #: A fleet runner's lease (`EVAL_RUNNER_LEASE_MS`): silent this long, its claims are another's to answer.
    lease_ms: int = DEFAULT_LEASE_MS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The configuration in `environ` (default `os.environ`); raises `ConfigError` naming every variable
        that is missing or wrong, in runner.md §2.1's order."""
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
        if self.database is not None and (password := urlsplit(self.database.expose()).password):
            keys.extend((password, unquote(password)))  # as written, and as the database reads it
        return tuple(dict.fromkeys(keys))


def admission_closed(state: Path) -> bool:
    """The admission switch (runner.md §4): `<state>/closed` present refuses every new request."""
    return os.path.lexists(state / "closed")


# --- reading ------------------------------------------------------------------------------------------


def quoted(text: str) -> str:
    """A value from the environment as a message shows it: Python's repr, so control characters are visible."""
    return repr(text)


class _Environment:
    """The variables, read trimmed, and the problems met so far (every check goes on after a problem)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self.problems: list[str] = []

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
        return Path(self._environ.get("TMPDIR") or "/tmp")  # noqa: S108 - the OS default temp directory

    def problem(self, message: str) -> None:
        self.problems.append(message)


def _unsigned(text: str, bound: int) -> int | None:
    if not _UNSIGNED.fullmatch(text):
        return None
    value = int(text)
    return value if value < bound else None


def _number(env: _Environment, name: str, default: int) -> int | None:
    """The variable as a count (`default` when unset); None, with a problem noted, when it is not one."""
    text = env.var(name)
    if text is None:
        return default
    value = _unsigned(text, _U64)
    if value is None:
        env.problem(f"{name} must be a number, not {quoted(text)}")
    return value


def _at_least_one(env: _Environment, name: str, value: int | None) -> None:
    if value == 0:
        env.problem(f"{name} must be at least 1")


def _brake(env: _Environment, name: str, bound: int) -> int | None:
    text = env.var(name)
    if text is None:
        return None
    value = _unsigned(text, bound)
    if not value:
        env.problem(
            f"{name} is an emergency brake: leave it unset for no limit, or set a positive number, not {quoted(text)}"
        )
        return None
    return value


def _millis(env: _Environment, name: str, default: int) -> int:
    text = env.var(name)
    if text is None:
        return default
    value = _unsigned(text, _U64)
    if not value:
        env.problem(f"{name} is a positive number of milliseconds, not {quoted(text)}")
        return default
    return value


def _relay(env: _Environment) -> Relay:
    embedded = EmbeddedRelay(DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT)
    url = env.var("EVAL_RUNNER_RELAY")
    if url is not None:
        if not _is_ws_url(url):
            env.problem(f"EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not {quoted(url)}")
            return embedded
        return ExternalRelay(url)
    listen = env.var("EVAL_RUNNER_LISTEN")
    if listen is None:
        return embedded
    parsed = _host_port(listen)
    if parsed is None:
        env.problem(f"EVAL_RUNNER_LISTEN must be HOST:PORT, not {quoted(listen)}")
        return embedded
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


def read_decision(environ: Mapping[str, str], door: ChatDoor) -> DecisionPin | None:
    """The decision door's pin in `environ` (runner.md §2.2), lending `door`'s key to the gateway as `serve`
    does; `eval run` reads it here too, so a test set's decision graders have the same door locally."""
    return _decision(_Environment(environ), door)


def _blobs(env: _Environment, relay: Relay, blossom: str | None) -> Blobs:
    """Where suite and tool files are kept: a named Blossom server, else an embedded one beside an embedded
    relay (or wherever `EVAL_RUNNER_BLOSSOM_LISTEN` says), else the external relay's own Blossom."""
    auth = env.var("EVAL_RUNNER_BLOSSOM_AUTH") or BLOB_AUTH[0]
    if auth not in BLOB_AUTH:
        env.problem(f"EVAL_RUNNER_BLOSSOM_AUTH is nip98 or bud02, not {quoted(auth)}")
    listen = env.var("EVAL_RUNNER_BLOSSOM_LISTEN")
    if blossom is not None:
        if listen is not None:
            env.problem("EVAL_RUNNER_BLOSSOM and EVAL_RUNNER_BLOSSOM_LISTEN: a Blossom server elsewhere, or one here")
        if not _is_http_url(blossom):
            env.problem(f"EVAL_RUNNER_BLOSSOM must be an http:// or https:// URL, not {quoted(blossom)}")
        return BlossomBlobs(blossom.rstrip("/"), auth)
    if listen is not None:
        parsed = _host_port(listen)
        if parsed is None:
            env.problem(f"EVAL_RUNNER_BLOSSOM_LISTEN must be HOST:PORT, not {quoted(listen)}")
            return EmbeddedBlobs(DEFAULT_LISTEN_HOST, 0)
        return EmbeddedBlobs(*parsed)
    if isinstance(relay, EmbeddedRelay):
        # Next to the relay: 7447 → 7448; a relay on any free port gets a blob server on any free port.
        return EmbeddedBlobs(relay.host, relay.port + 1 if 0 < relay.port < 65_535 else 0)
    return BlossomBlobs(_relay_blossom(relay.url), auth)


def _relay_blossom(relay_url: str) -> str:
    """The relay's own Blossom base (wire.md §19.1): `wss://host` → `https://host`, path dropped."""
    parts = urlsplit(relay_url)
    return f"{'https' if parts.scheme.lower() == 'wss' else 'http'}://{parts.netloc}"


def _is_http_url(text: str) -> bool:
    if any(char in WHITE_SPACE for char in text):
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def _bucket(env: _Environment, blossom: str | None) -> Bucket | None:
    url = env.var("EVAL_RUNNER_BUCKET")
    gcloud = env.var("EVAL_RUNNER_GCLOUD_CONFIG")
    if url is None and gcloud is None:
        return None
    if url is None or gcloud is None:
        env.problem("EVAL_RUNNER_BUCKET and EVAL_RUNNER_GCLOUD_CONFIG go together")
        return None
    wrong = len(env.problems)
    if blossom is None:
        env.problem("EVAL_RUNNER_BUCKET needs EVAL_RUNNER_BLOSSOM, its public read base")
    if not url.startswith("gs://"):
        env.problem(f"{url} is not a gs:// bucket")
    return Bucket(url, Path(gcloud)) if len(env.problems) == wrong else None


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


def _agent(env: _Environment) -> AgentChoice | None:
    text = env.var("EVAL_RUNNER_AGENT")
    if text is None:
        return None
    try:
        return parse_choice(text)
    except AgentChoiceError as error:
        env.problem(f"EVAL_RUNNER_AGENT: {error.message}")
        return None


def _read(environ: Mapping[str, str]) -> Config:
    env = _Environment(environ)
    relay = _relay(env)

    catalog_text = env.var("EVAL_RUNNER_CATALOG")
    catalog = tuple(Path(part) for part in (catalog_text or "").split(":") if part)
    if not catalog:
        env.problem("EVAL_RUNNER_CATALOG names no extension directory")
    coder = env.var("EVAL_RUNNER_CODER")
    agent = _agent(env)
    if agent is not None and (program := agent.program()) is not None:
        # Its own path, else the installed one (scripts/agents) or the built-in agent's script.
        coder = str(program)
    if coder is None:
        env.problem("EVAL_RUNNER_CODER is not set")
    questions = env.var("EVAL_RUNNER_QUESTIONS")
    door_key = env.var("CODER_DOOR_KEY") or env.var("CODER_AI_GATEWAY_KEY")
    if door_key is None:
        env.problem("no door key: set CODER_DOOR_KEY or CODER_AI_GATEWAY_KEY")
    door = ChatDoor(
        url=env.var("CODER_DOOR_URL") or DEFAULT_DOOR_URL,
        model=env.var("CODER_MODEL") or DEFAULT_MODEL,
        key=Secret(door_key or ""),
    )
    decision = _decision(env, door) if door_key is not None else None

    runs_per_trainer = _brake(env, "EVAL_RUNNER_RUNS_PER_DAY", _U32)
    turns_per_day = _brake(env, "EVAL_RUNNER_TURNS_PER_DAY", _U64)
    jobs = _number(env, "EVAL_RUNNER_JOBS", DEFAULT_JOBS)
    concurrency = _number(env, "EVAL_RUNNER_CONCURRENCY", DEFAULT_CONCURRENCY)
    if concurrency is not None and concurrency not in CONCURRENCY_RANGE:
        env.problem("EVAL_RUNNER_CONCURRENCY must be from 1 to 8")
    _at_least_one(env, "EVAL_RUNNER_JOBS", jobs)
    limits = Limits(runs_per_trainer, turns_per_day, jobs or DEFAULT_JOBS, concurrency or DEFAULT_CONCURRENCY)
    run_disk = _number(env, "EVAL_RUNNER_RUN_DISK_MB", DEFAULT_RUN_DISK_MIB)
    _at_least_one(env, "EVAL_RUNNER_RUN_DISK_MB", run_disk)
    floor = _number(env, "EVAL_RUNNER_DISK_FLOOR_MB", DEFAULT_DISK_FLOOR_MIB)
    disk = Disk((run_disk or DEFAULT_RUN_DISK_MIB) << 20, (DEFAULT_DISK_FLOOR_MIB if floor is None else floor) << 20)

    blossom = env.var("EVAL_RUNNER_BLOSSOM")
    blobs = _blobs(env, relay, blossom)
    bucket = _bucket(env, blossom)
    key_file, key_may_be_generated = key_file_location(environ)
    state = _state(env)
    temp = env.var("EVAL_RUNNER_TMP")
    temp_root = Path(temp) if temp is not None else env.temp_dir()

    defaults_root = env.var("EVAL_RUNNER_DEFAULTS_ROOT")
    if defaults_root is not None:
        if _HEX64.fullmatch(defaults_root):
            defaults_root = defaults_root.lower()
        else:
            env.problem("EVAL_RUNNER_DEFAULTS_ROOT must be a 64-hex public key")
    documents = env.var("EVAL_RUNNER_DEFAULTS_DOCS")
    defaults_documents = Path(documents) if documents is not None else env.home() / HOME_DEFAULTS_DOCS

    probe_ms = _millis(env, "EVAL_RUNNER_PROBE_MS", DEFAULT_PROBE_MS)
    renew_ms = _millis(env, "EVAL_RUNNER_RENEW_MS", DEFAULT_RENEW_MS)
    gates = env.var("GYM_GATES_DIR")
    metrics_listen = _metrics_listen(env)
    database = env.var("EVAL_RUNNER_DATABASE")
    if database is not None and not database.startswith(("postgresql://", "postgres://")):
        env.problem("EVAL_RUNNER_DATABASE must be a postgresql:// URL")  # never the value: it may hold a password
    elif database is not None and database_parts(database) is None:
        env.problem(f"EVAL_RUNNER_DATABASE: {UNREADABLE_DATABASE}")
    lease_ms = _millis(env, "EVAL_RUNNER_LEASE_MS", DEFAULT_LEASE_MS)

    if env.problems:
        raise ConfigError(*env.problems)
    assert coder is not None
    return Config(
        relay=relay,
        catalog=catalog,
        coder=Path(coder),
        questions=Path(questions) if questions is not None else None,
        door=door,
        decision=decision,
        limits=limits,
        disk=disk,
        blobs=blobs,
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
        metrics_listen=metrics_listen,
        agent=agent,
        database=Secret(database) if database is not None else None,
        lease_ms=lease_ms,
    )


def _metrics_listen(env: _Environment) -> MetricsListen | None:
    text = env.var("EVAL_RUNNER_METRICS_LISTEN")
    if text is None:
        return None
    parsed = _host_port(text)
    if parsed is None:
        env.problem(f"EVAL_RUNNER_METRICS_LISTEN must be HOST:PORT, not {quoted(text)}")
        return None
    return MetricsListen(*parsed)
