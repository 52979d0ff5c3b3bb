"""The runner's log lines as a test sees them: every `eval_runner` record's message, in order.

`captured_logs()` attaches a handler to the `eval_runner` logger for the length of a `with`; a test reads
`lines`, or awaits a line holding a fragment with `wait_for` (lines may come from worker threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from eval_runner.logs import lines_to
from tests.support.stand_in_relay import BOUND


class LogLines:
    """The lines logged while capturing, and a way to await one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._guard = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def __call__(self, line: str) -> None:
        with self._guard:
            self.lines.append(line)
            waiters = list(self._waiters)
        for loop, grew in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits there any more
                loop.call_soon_threadsafe(grew.set)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def matching(self, fragment: str) -> list[str]:
        return [line for line in self.lines if fragment in line]

    async def wait_for(self, fragment: str, count: int = 1, within: float = BOUND) -> str:
        """The `count`-th line holding `fragment`, once there is one (at most `within` seconds)."""
        grew = asyncio.Event()
        waiter = (asyncio.get_running_loop(), grew)
        with self._guard:
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(within):
                while True:
                    grew.clear()
                    found = self.matching(fragment)
                    if len(found) >= count:
                        return found[count - 1]
                    await grew.wait()
        finally:
            with self._guard:
                self._waiters.remove(waiter)


@contextlib.contextmanager
def captured_logs() -> Iterator[LogLines]:
    """Capture the `eval_runner` log lines while inside."""
    logs = LogLines()
    with lines_to(logs):
        yield logs
