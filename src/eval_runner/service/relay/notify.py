"""systemd notifications: `READY=1` once the requests subscription is up, `WATCHDOG=1` per proof of life.

The unit runs with `WatchdogSec=120`: systemd restarts a runner that stops saying its relay
subscription is live (runner.md §8 step 8), a backstop behind the liveness probes for a process
stuck somewhere they cannot see. The reference pings only `WATCHDOG=1`; `READY=1` is ours, sent once,
so a unit may use `Type=notify` and count the service up only when requests can arrive (harmless under
the reference's `Type=simple`, which ignores it).

`NOTIFY_SOCKET` is a datagram socket path, or `@name` for a Linux abstract socket. Without it every
call is a no-op, and a send that fails (systemd gone, buffer full) is dropped silently: a missed ping
is exactly what the watchdog exists to notice, so it must never take the runner down.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Final

READY: Final = "READY=1"
WATCHDOG: Final = "WATCHDOG=1"


def _address(text: str) -> str | None:
    """The `sendto` address for a `NOTIFY_SOCKET` value, or None for one we cannot use."""
    if text.startswith("@"):
        return "\0" + text[1:] if len(text) > 1 else None
    if text.startswith("/"):
        return text
    return None  # relative paths and other families (vsock:…) are not ours to guess


class Notifier:
    """Sends systemd notification datagrams to one socket, or nothing at all."""

    __slots__ = ("_address", "_ready_sent", "_socket")

    def __init__(self, notify_socket: str | None) -> None:
        text = (notify_socket or "").strip()
        self._address = _address(text) if text else None
        self._socket: socket.socket | None = None
        self._ready_sent = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """The notifier `NOTIFY_SOCKET` names (read from `environ`, default the process environment)."""
        return cls((os.environ if environ is None else environ).get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, state: str) -> bool:
        """Send one datagram; True if it left. Never raises."""
        if self._address is None:
            return False
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._socket.setblocking(False)
            self._socket.sendto(state.encode("utf-8"), self._address)
        except OSError:
            return False
        return True

    def ready(self) -> None:
        """`READY=1`, the first time only: later subscriptions are reconnects, not startup."""
        if not self._ready_sent:
            self._ready_sent = self.notify(READY) or self._address is None

    def watchdog(self) -> None:
        """`WATCHDOG=1`: the relay has just proven the subscription live."""
        self.notify(WATCHDOG)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
