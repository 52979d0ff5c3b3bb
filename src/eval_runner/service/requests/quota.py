"""The day's counts and the emergency brake (runner.md §18).

There is no usage limit by default: with neither brake set `Quota.take` never refuses. It still counts every
admitted run and its agent turns per UTC day in `<state>/quota.json`, saved atomically on every change, so a
brake an operator sets mid-day starts from the day's real counts and holds across a restart.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from eval_runner.errors import EvalRunnerError
from eval_runner.service.ledger.claims import LedgerError
from eval_runner.service.ledger.counts import CountRecords
from eval_runner.service.settings import Limits, os_error_text

DAY_SECONDS: Final = 86_400

#: What a brake's refusal says: no count, no reset time (the phone shows "try again later").
BRAKED: Final = "the hosted runner can't take this run right now; try again later"

OVER_QUOTA: Final = "over_quota"

logger = logging.getLogger(__name__)


class OverQuotaError(EvalRunnerError):
    """A set brake is spent. Answer `over_quota` with `message` (always `BRAKED`)."""

    code: str = OVER_QUOTA
    message: str

    def __init__(self) -> None:
        super().__init__(BRAKED)
        self.message = BRAKED


@dataclass(frozen=True, slots=True)
class DayCounts:
    """One UTC day's counts: `day` is days since the Unix epoch."""

    day: int
    runs: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    turns: int = 0

    def runs_of(self, trainer: str) -> int:
        return self.runs.get(trainer, 0)

    def to_json(self) -> str:
        """`quota.json`'s text: `{"day", "runs" (by trainer, sorted), "turns"}`, pretty, two spaces."""
        document = {"day": self.day, "runs": dict(sorted(self.runs.items())), "turns": self.turns}
        return json.dumps(document, indent=2, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Ticket:
    """What one admission took, to give back if the run is refused later the same day."""

    day: int
    trainer: str
    run: bool
    turns: int


def day_of(now: float) -> int:
    """The UTC day (days since the epoch) of unix time `now` in seconds."""
    return int(now) // DAY_SECONDS


class Quota:
    """The counts, kept in `path` (`<state>/quota.json`). Safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._day = self._load()

    def today(self, now: float) -> DayCounts:
        """The counts of the UTC day holding `now` (empty for a day not yet counted)."""
        with self._lock:
            return self._today(day_of(now))

    def take(self, trainer: str, turns: int, *, check: bool, now: float, limits: Limits) -> Ticket:
        """Count one run for `trainer` (none for a check) and `turns` turns; raises `OverQuotaError`, taking
        nothing, when a set brake would be exceeded: the trainer's runs already at the runs brake (never
        for a check), or the day's turns plus these over the turns brake."""
        if turns < 0:
            raise ValueError("turns are never negative")
        day = day_of(now)
        with self._lock:
            counts = self._today(day)
            used = counts.runs_of(trainer)
            if (not check and limits.runs_per_trainer is not None and used >= limits.runs_per_trainer) or (
                limits.turns_per_day is not None and counts.turns + turns > limits.turns_per_day
            ):
                raise OverQuotaError()
            runs = dict(counts.runs)
            if not check:
                runs[trainer] = used + 1
            self._day = DayCounts(day, MappingProxyType(runs), counts.turns + turns)
            self._save()
        return Ticket(day, trainer, not check, turns)

    def give_back(self, ticket: Ticket) -> None:
        """Return what `ticket` took, if its day is still the one counted (a new day is empty anyway)."""
        with self._lock:
            counts = self._day
            if counts.day != ticket.day:
                return
            runs = dict(counts.runs)
            if ticket.run and ticket.trainer in runs:
                runs[ticket.trainer] = max(0, runs[ticket.trainer] - 1)
            self._day = DayCounts(counts.day, MappingProxyType(runs), max(0, counts.turns - ticket.turns))
            self._save()

    def _today(self, day: int) -> DayCounts:
        return self._day if self._day.day == day else DayCounts(day)

    def _load(self) -> DayCounts:
        try:
            text = self.path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return DayCounts(0)
        except (OSError, UnicodeDecodeError) as error:
            why = os_error_text(error) if isinstance(error, OSError) else "not UTF-8"
            logger.warning("quota: %s: %s", self.path, why)
            return DayCounts(0)
        counts = _parse(text)
        if counts is None:
            logger.warning("quota: %s: not a day's counts; starting from none", self.path)
            return DayCounts(0)
        return counts

    def _save(self) -> None:
        try:
            write_atomic(self.path, self._day.to_json().encode("utf-8"))
        except OSError as error:
            logger.warning("quota: %s: %s", self.path, os_error_text(error))


class SharedQuota(Quota):
    """The same counts in a fleet's shared ledger (`EVAL_RUNNER_DATABASE`): each count is one transaction
    under the key's writer lock, so the brake holds fleet-wide and exactly, however many runners admit at
    once. No `quota.json` is read or written. A database failure counts nothing and admits the run (the
    ledger's own write then says whether the database is there), as an unreadable `quota.json` does."""

    def __init__(self, counts: CountRecords) -> None:
        self.path = Path()
        self._lock = threading.Lock()
        self._counts = counts

    def today(self, now: float) -> DayCounts:
        day = day_of(now)
        runs, turns = self._counts.day_counts(day)
        return DayCounts(day, MappingProxyType(dict(runs)), turns)

    def take(self, trainer: str, turns: int, *, check: bool, now: float, limits: Limits) -> Ticket:
        if turns < 0:
            raise ValueError("turns are never negative")
        day = day_of(now)
        try:
            counted = self._counts.count(
                trainer,
                turns,
                run=not check,
                day=day,
                runs_brake=limits.runs_per_trainer,
                turns_brake=limits.turns_per_day,
            )
        except LedgerError as error:
            logger.warning("quota: %s", error.message)
            return Ticket(day, trainer, False, 0)
        if not counted:
            raise OverQuotaError()
        return Ticket(day, trainer, not check, turns)

    def give_back(self, ticket: Ticket) -> None:
        if not ticket.run and not ticket.turns:
            return
        try:
            self._counts.uncount(ticket.trainer, ticket.turns, run=ticket.run, day=ticket.day)
        except LedgerError as error:
            logger.warning("quota: %s", error.message)


def quota_for(path: Path, ledger: object) -> Quota:
    """The counts `serve` keeps: in a fleet's shared ledger when it has one, else in `path` (`quota.json`)."""
    return SharedQuota(ledger) if isinstance(ledger, CountRecords) and ledger.shared else Quota(path)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _parse(text: str) -> DayCounts | None:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    day, turns, runs = _count(document.get("day")), _count(document.get("turns")), document.get("runs")
    if day is None or turns is None or not isinstance(runs, dict):
        return None
    counted: dict[str, int] = {}
    for trainer, value in runs.items():
        count = _count(value)
        if count is None:
            return None
        counted[trainer] = count
    return DayCounts(day, MappingProxyType(counted), turns)


def write_atomic(path: Path, body: bytes) -> None:
    """Replace `path` with `body` whole: a uniquely named owner-only temporary file in the same directory,
    flushed, renamed over it. Concurrent writers never share a temporary file; none is left behind."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename is done; a directory that won't sync is not a failure
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
