"""The usage log and the `usage` report (runner.md §19, §3.5).

There is no usage limit; instead every request the runner answers, admitted or refused, is one JSON line
in `<state>/usage/YYYY-MM-DD.jsonl` (the UTC day it arrived), so usage stats are one command away. A record
holds ids, words from fixed vocabularies, counts and times: never a test's text, never a key's secret.
Lines are appended whole (one `write`, `O_APPEND`); reading counts a line that is not a record instead of
failing on it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Final, TextIO

from eval_runner.errors import EvalRunnerError
from eval_runner.service.config import WHITE_SPACE
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.counts import CountRecords
from eval_runner.service.ledger.postgres import read_usage_lines
from eval_runner.service.settings import UNREADABLE_DATABASE, database_parts, os_error_text

OUTCOMES: Final = ("completed", "failed", "cancelled", "refused")
ACTIONS: Final = ("run", "check", "validation", "publish", "unread")

_U32: Final = 2**32
_U64: Final = 2**64

logger = logging.getLogger(__name__)


def arrival_time(unix_ms: int) -> str:
    """`unix_ms` as the record's `time`: `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC)."""
    moment = datetime.fromtimestamp(unix_ms // 1000, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{unix_ms % 1000:03d}Z"


def now_ms() -> int:
    """Unix milliseconds now."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One answered request. Field order is the line's key order; `None` fields are left out.

    `result` is the `3189` a publish published, or the one a check or a validation cites; `report` (ours,
    beside runner.md §19.1) the digest of the report a publish published when it is not the sealed one: a
    draft test set is released first and the report rewritten to name it, which changes its digest.
    """

    time: str
    key: str
    request: str
    action: str
    subject: str | None = None
    suite: str | None = None
    tests: int | None = None
    runs: int | None = None
    turns: int | None = None
    outcome: str
    code: str | None = None
    verdict: str | None = None
    subject_passed: int | None = None
    baseline_passed: int | None = None
    result: str | None = None
    report: str | None = None
    total_ms: int
    bytes_in: int

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is None:
                continue
            if spec.name in _COUNTS:
                if not _is_count(value, _COUNTS[spec.name]):
                    raise ValueError(f"usage record: {spec.name} is not a count")
            elif not isinstance(value, str):
                raise TypeError(f"usage record: {spec.name} is not a string")

    @classmethod
    def arrived(cls, *, key: str, request: str, bytes_in: int, arrival_ms: int, outcome: str) -> Record:
        """A record of a request from `key`, `bytes_in` long, that arrived at `arrival_ms`; its action is
        `unread` until the input is known (fill the rest with `dataclasses.replace`)."""
        return cls(
            time=arrival_time(arrival_ms),
            key=key,
            request=request,
            action="unread",
            outcome=outcome,
            total_ms=0,
            bytes_in=bytes_in,
        )

    def to_json(self) -> dict[str, str | int]:
        return {spec.name: value for spec in fields(self) if (value := getattr(self, spec.name)) is not None}

    def line(self) -> str:
        """The record as one compact JSON line, newline included."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"

    @property
    def day(self) -> str:
        """The first ten characters of `time` (its date), or `-` when it has none."""
        return _first_ten(self.time)


#: Count fields and their exclusive bounds (the reference's u32/u64).
_COUNTS: Final = {
    "tests": _U64,
    "runs": _U32,
    "turns": _U64,
    "subject_passed": _U64,
    "baseline_passed": _U64,
    "total_ms": _U64,
    "bytes_in": _U64,
}
_REQUIRED: Final = ("time", "key", "request", "action", "outcome", "total_ms", "bytes_in")
_FIELDS: Final = frozenset(spec.name for spec in fields(Record))


def _is_count(value: object, bound: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < bound


def _first_ten(text: str) -> str:
    head = text.encode("utf-8", "surrogatepass")[:10]
    if len(head) < 10:
        return "-"
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError:  # ten bytes end inside a character
        return "-"


# --- writing ------------------------------------------------------------------------------------------


class UsageLogError(EvalRunnerError):
    """A record could not be written: `<path>: <error>`."""


class UsageLog:
    """The usage log: a directory of day files, made (0700) on the first append."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, record: Record) -> Path:
        day = record.day
        return self.directory / f"{day if day != '-' else 'unknown'}.jsonl"

    def append(self, record: Record) -> None:
        """Append `record` to its arrival day's file as one line, in one write."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise UsageLogError(f"{self.directory}: {os_error_text(error)}") from None
        path = self.path_for(record)
        line = record.line().encode("utf-8")
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                written = os.write(descriptor, line)
                # A regular file takes the whole line at once; only a full disk or a signal stops short,
                # and then the rest still follows at the end.
                while written < len(line):
                    written += os.write(descriptor, line[written:])
            finally:
                os.close(descriptor)
        except OSError as error:
            raise UsageLogError(f"{path}: {os_error_text(error)}") from None

    def keep(self, record: Record) -> bool:
        """Append `record`; a failure only logs `usage log: <error>` (runner.md §19.1). True if written."""
        try:
            self.append(record)
        except UsageLogError as error:
            logger.warning("usage log: %s", error)
            return False
        return True

    def close(self) -> None:
        """Write what is still waiting (a log that waits for nothing has nothing to do)."""


class SharedUsageLog(UsageLog):
    """A fleet's usage log (`EVAL_RUNNER_DATABASE`): each line a row of the shared ledger's `usage_lines`,
    written by the runner that answered, so `usage` reads every runner's. `keep` hands the line to one
    writer thread (a database round trip never holds up the event loop; lines keep their order); `close`
    writes what is left. A failed write only logs, as a file's does."""

    def __init__(self, lines: CountRecords) -> None:
        super().__init__(Path())
        self._lines = lines
        self._waiting: queue.SimpleQueue[Record | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_all, name="usage lines", daemon=True)
        self._writer.start()

    def append(self, record: Record) -> None:
        try:
            self._lines.keep_usage(record.day, record.line().rstrip("\n"))
        except LedgerError as error:
            raise UsageLogError(f"the ledger database: {error.message}") from None

    def keep(self, record: Record) -> bool:
        self._waiting.put(record)
        return True

    def close(self) -> None:
        self._waiting.put(None)
        self._writer.join()

    def _write_all(self) -> None:
        while (record := self._waiting.get()) is not None:
            try:
                self.append(record)
            except UsageLogError as error:
                logger.warning("usage log: %s", error)


def usage_log_for(directory: Path, ledger: object) -> UsageLog:
    """Where `serve` keeps usage lines: a fleet's shared ledger when it has one, else `directory`."""
    return SharedUsageLog(ledger) if isinstance(ledger, CountRecords) and ledger.shared else UsageLog(directory)


# --- reading ------------------------------------------------------------------------------------------


class UsageError(EvalRunnerError):
    """Why the log could not be read, or a `since` or `by` word is wrong; `str()` is the message."""


@dataclass(frozen=True, slots=True)
class UsageRead:
    records: tuple[Record, ...]
    #: Non-blank lines that did not read as a record.
    unreadable: int
    #: Day files in the directory (before `since`); none means there is no usage log yet.
    days: int = 0


def _date_shaped(text: str) -> bool:
    """`YYYY-MM-DD` by shape: ten characters, dashes at 4 and 7, ASCII digits elsewhere."""
    return (
        len(text) == 10
        and text[4] == "-"
        and text[7] == "-"
        and all(char in "0123456789" for i, char in enumerate(text) if i not in (4, 7))
    )


def date_problem(text: str) -> str | None:
    """Why `text` is not a `YYYY-MM-DD` day on the calendar, or None when it is one."""
    if not _date_shaped(text):
        return f"{text} is not a YYYY-MM-DD date"
    try:
        date(int(text[:4]), int(text[5:7]), int(text[8:]))
    except ValueError as error:  # e.g. "month must be in 1..12", "day is out of range for month"
        return f"{text} is not a date on the calendar: {error}"
    return None


def is_date(text: str) -> bool:
    """`YYYY-MM-DD`, and a day the calendar has."""
    return date_problem(text) is None


class _Pairs(list[tuple[str, object]]):
    """An object's members in order, so a repeated field can be refused as the reference's serde does."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_record(line: str) -> Record | None:
    """One log line as a record, or None when it is not one (never raises)."""
    try:
        document = json.loads(line, object_pairs_hook=_Pairs, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, _Pairs):
        return None
    members: dict[str, object] = {}
    for name, value in document:
        if name in _FIELDS:
            if name in members:
                return None
            members[name] = value
    if any(members.get(name) is None for name in _REQUIRED):
        return None
    values = {name: value for name, value in members.items() if value is not None}
    for name, value in values.items():
        if name in _COUNTS:
            if not _is_count(value, _COUNTS[name]):
                return None
        elif not isinstance(value, str) or not _encodable(value):
            return None
    try:
        return Record(**values)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # pragma: no cover - the checks above are the record's own
        return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape, which the reference's reader refuses
        return False
    return True


def read_lines(body: bytes) -> tuple[list[Record], int]:
    """The records in one day file's bytes and the count of non-blank lines that are not records."""
    records: list[Record] = []
    unreadable = 0
    for raw in body.split(b"\n"):
        raw = raw.removesuffix(b"\r")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            unreadable += 1
            continue
        if not line.strip(WHITE_SPACE):
            continue
        record = parse_record(line)
        if record is None:
            unreadable += 1
        else:
            records.append(record)
    return records, unreadable


def read(directory: Path, since: str | None = None) -> UsageRead:
    """Every record in `directory`'s day files (`YYYY-MM-DD.jsonl`; other names ignored) dated on or
    after `since`, oldest day first. A directory not made yet holds no usage log (`days` 0). Raises
    `UsageError` for a bad `since` or a directory or day file that cannot be read."""
    if since is not None and (problem := date_problem(since)) is not None:
        raise UsageError(problem)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return UsageRead((), 0, 0)
    except OSError as error:
        raise UsageError(f"{directory}: {os_error_text(error)}") from None
    days = sorted(
        (name.removesuffix(".jsonl"), directory / name)
        for name in names
        if name.endswith(".jsonl") and is_date(name.removesuffix(".jsonl"))
    )
    records: list[Record] = []
    unreadable = 0
    for day, path in days:
        if since is not None and day < since:
            continue
        try:
            body = path.read_bytes()
        except OSError as error:
            raise UsageError(f"{path}: {os_error_text(error)}") from None
        found, bad = read_lines(body)
        records.extend(found)
        unreadable += bad
    return UsageRead(tuple(records), unreadable, len(days))


def read_database(url: str, since: str | None = None) -> UsageRead:
    """Every usage line of the fleet's database at `url` (every runner's, every runner key's), dated on or
    after `since`, oldest day first; `days` counts the days that have lines."""
    if since is not None and (problem := date_problem(since)) is not None:
        raise UsageError(problem)
    if database_parts(url) is None:  # libpq's own error would quote the URL's parts
        raise UsageError(f"EVAL_RUNNER_DATABASE: {UNREADABLE_DATABASE}")
    try:
        lines = read_usage_lines(url, since)
    except LedgerError as error:
        raise UsageError(error.message) from None
    found, unreadable = read_lines("".join(f"{line}\n" for _, line in lines).encode("utf-8"))
    return UsageRead(tuple(found), unreadable, len({day for day, _ in lines}))


# --- stats and the table ------------------------------------------------------------------------------


class By(StrEnum):
    """What the report groups by."""

    KEY = "key"
    ACTION = "action"
    SUBJECT = "subject"
    DAY = "day"
    OUTCOME = "outcome"

    @classmethod
    def parse(cls, word: str) -> By:
        try:
            return cls(word)
        except ValueError:
            raise UsageError(f"--by is key, action, subject, day, or outcome, not {word}") from None

    def group(self, record: Record) -> str:
        if self is By.KEY:
            return record.key
        if self is By.ACTION:
            return record.action
        if self is By.SUBJECT:
            return record.subject if record.subject is not None else "-"
        if self is By.DAY:
            return record.day
        return record.outcome if record.code is None else f"{record.outcome} {record.code}"


@dataclass(frozen=True, slots=True)
class Row:
    """One group's totals. `turns` sums the records that were not refused; `total_p50_ms` is the upper
    median total time of completed records, None when there are none."""

    group: str
    jobs: int
    completed: int
    failed: int
    refused: int
    keys: int
    turns: int
    total_p50_ms: int | None

    def to_json(self) -> dict[str, str | int | None]:
        return {
            "group": self.group,
            "jobs": self.jobs,
            "completed": self.completed,
            "failed": self.failed,
            "refused": self.refused,
            "keys": self.keys,
            "turns": self.turns,
            "total_p50_ms": self.total_p50_ms,
        }


def _row(group: str, records: Sequence[Record]) -> Row:
    totals = sorted(record.total_ms for record in records if record.outcome == "completed")
    return Row(
        group=group,
        jobs=len(records),
        completed=sum(record.outcome == "completed" for record in records),
        failed=sum(record.outcome == "failed" for record in records),
        refused=sum(record.outcome == "refused" for record in records),
        keys=len({record.key for record in records}),
        turns=sum(record.turns or 0 for record in records if record.outcome != "refused"),
        total_p50_ms=totals[len(totals) // 2] if totals else None,
    )


def stats(records: Iterable[Record], by: By) -> list[Row]:
    """Rows grouped `by`: days in date order, otherwise busiest first then by name; then an `all` row."""
    every = list(records)
    groups: dict[str, list[Record]] = {}
    for record in every:
        groups.setdefault(by.group(record), []).append(record)
    rows = [_row(group, members) for group, members in groups.items()]
    if by is By.DAY:
        rows.sort(key=lambda row: row.group)
    else:
        rows.sort(key=lambda row: (-row.jobs, row.group))
    rows.append(_row("all", every))
    return rows


HEADINGS: Final = ("jobs", "completed", "failed", "refused", "keys", "turns", "total_p50_ms")


def table(rows: Sequence[Row], by: By) -> str:
    """An aligned text table: the first column left-aligned, the rest right-aligned, two spaces apart,
    trailing spaces trimmed, one newline per line; an unknown median prints as `-`."""
    lines: list[tuple[str, ...]] = [(by.value, *HEADINGS)]
    for row in rows:
        p50 = "-" if row.total_p50_ms is None else str(row.total_p50_ms)
        counts = (row.jobs, row.completed, row.failed, row.refused, row.keys, row.turns)
        lines.append((row.group, *(str(count) for count in counts), p50))
    widths = [max(len(line[column]) for line in lines) for column in range(len(lines[0]))]
    out = []
    for line in lines:
        cells = [
            line[0].ljust(widths[0]),
            *(cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)),
        ]
        out.append("  ".join(cells).rstrip(" ") + "\n")
    return "".join(out)


def rows_json(rows: Sequence[Row]) -> str:
    """The rows as a pretty-printed JSON array (two-space indent), no trailing newline."""
    return json.dumps([row.to_json() for row in rows], indent=2, ensure_ascii=False)


# --- the command --------------------------------------------------------------------------------------


def default_directory(environ: Mapping[str, str]) -> Path:
    """`$EVAL_RUNNER_STATE/usage`, else `$HOME/.openagents/eval-runner/usage` (runner.md §3.5)."""
    state = environ.get("EVAL_RUNNER_STATE")
    if state is None:
        state = str(Path(environ.get("HOME", "")) / ".openagents" / "eval-runner")
    return Path(state) / "usage"


@dataclass(frozen=True, slots=True)
class UsageArguments:
    """What `usage` was asked (the command line parses it): days from `since` (YYYY-MM-DD, None: all),
    grouped `by`, as JSON or a table, from the log in `directory`."""

    since: str | None
    by: By
    json: bool
    directory: Path
    #: A fleet's database (`EVAL_RUNNER_DATABASE`): read its usage lines instead of `directory`.
    database: str | None = None


def no_usage_line(directory: Path) -> str:
    """What `usage` says before the runner has answered anything."""
    return f"no usage yet: {directory} holds no usage log"


def usage_main(arguments: UsageArguments, *, stdout: TextIO, stderr: TextIO) -> int:
    """`eval-runner usage`. Reads only the log; needs no key or catalog. A log that cannot be read prints
    `eval-runner: <error>` on stderr and returns 1; otherwise 0. With no log yet the table is replaced by
    one line saying so (`--json` still prints the rows, all zero)."""
    try:
        if arguments.database is not None:
            found = read_database(arguments.database, arguments.since)
        else:
            found = read(arguments.directory, arguments.since)
    except UsageError as error:
        stderr.write(f"eval-runner: {error}\n")
        return 1
    if found.days == 0 and not arguments.json:
        where = "the ledger database holds no usage lines" if arguments.database else None
        stdout.write((f"no usage yet: {where}" if where else no_usage_line(arguments.directory)) + "\n")
        return 0
    rows = stats(found.records, arguments.by)
    stdout.write(rows_json(rows) + "\n" if arguments.json else table(rows, arguments.by))
    if found.unreadable:
        stderr.write(f"{found.unreadable} lines did not read as records\n")
    return 0
