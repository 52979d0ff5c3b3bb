"""The one logging setup: every module logs with `logging.getLogger(__name__)`, all under `eval_runner`.

A log line is the message alone (runner.md §20's vocabulary, one line each, no level or time: the journal
adds its own), so `MessageOnly` is the only formatter. Whoever runs the service decides where the lines
go, once: the `serve` command (cli) sends them to stderr with `lines_to_stream`, the demo to its console
with `lines_to`. Nothing is configured on import, so a library user's own logging setup is left alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Final, TextIO

ROOT: Final = "eval_runner"


class MessageOnly(logging.Formatter):
    """Formats a record as its message and nothing else."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


class LineHandler(logging.Handler):
    """Hands each record's line to `write` (called in the thread that logged)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(MessageOnly())
        self._write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record))
        except Exception:  # a broken sink must not break the runner; logging reports it its own way
            self.handleError(record)


@contextlib.contextmanager
def lines_to(write: Callable[[str], None]) -> Iterator[LineHandler]:
    """While inside, every `eval_runner` line at INFO or above goes to `write`; the logger is put back after."""
    logger = logging.getLogger(ROOT)
    handler = LineHandler(write)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def lines_to_stream(stream: TextIO) -> contextlib.AbstractContextManager[LineHandler]:
    """`lines_to` a text stream: one line each, flushed at once (stderr under systemd is a pipe)."""

    def write(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return lines_to(write)
