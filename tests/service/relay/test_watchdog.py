"""systemd's watchdog is petted by answered probes (runner.md §8 step 8, §21.3), and told READY once.

A real datagram socket stands in for systemd's notify socket: the listener's notifier sends to
the path (or `@abstract` name) in `NOTIFY_SOCKET`, and the test awaits each datagram.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.service.relay.notify import Notifier
from tests.support.listening import listening, subscribe
from tests.support.stand_in_relay import BOUND, StandInRelay


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = tmp_path / "notify"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    receiver.setblocking(False)
    yield str(path), receiver
    receiver.close()


async def datagram(receiver: socket.socket) -> bytes:
    return await asyncio.wait_for(asyncio.get_running_loop().sock_recv(receiver, 256), BOUND)


async def test_an_answered_probe_pets_the_systemd_watchdog(notify_socket: tuple[str, socket.socket]) -> None:
    path, receiver = notify_socket
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
    async with StandInRelay() as relay, listening(relay.url, probe=0.2, notifier=notifier) as run:
        connection = await subscribe(relay, run, answer_probes=True)
        # The subscription's EOSE: READY once, then the first WATCHDOG.
        assert await datagram(receiver) == b"READY=1"
        assert await datagram(receiver) == b"WATCHDOG=1"
        # Then one per answered probe.
        assert await datagram(receiver) == b"WATCHDOG=1"
        assert await datagram(receiver) == b"WATCHDOG=1"
        assert connection.probes_answered >= 2


async def test_a_silent_relay_stops_the_pings(notify_socket: tuple[str, socket.socket]) -> None:
    path, receiver = notify_socket
    notifier = Notifier(path)
    async with StandInRelay() as relay, listening(relay.url, probe=0.2, notifier=notifier) as run:
        silent = await subscribe(relay, run)  # probes never answered
        assert await datagram(receiver) == b"READY=1"
        assert await datagram(receiver) == b"WATCHDOG=1"
        await run.logs.wait_for("stopped answering")
        rejoined = await subscribe(relay, run)
        # The next datagram is the new subscription's EOSE: nothing was sent for the silent probes,
        # and READY is not repeated on a reconnect.
        assert await datagram(receiver) == b"WATCHDOG=1"
        assert silent.probes_answered == rejoined.probes_answered == 0


def test_an_abstract_notify_socket_receives_ready_and_watchdog() -> None:
    name = f"eval-runner-test-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        receiver.settimeout(BOUND)
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": f"@{name}"})
        notifier.ready()
        notifier.ready()  # once only
        notifier.watchdog()
        assert [receiver.recv(64), receiver.recv(64)] == [b"READY=1", b"WATCHDOG=1"]
        notifier.close()


def test_without_notify_socket_nothing_is_sent() -> None:
    for environ in ({}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "relative/path"}):
        notifier = Notifier.from_environ(environ)
        assert not notifier.enabled
        assert notifier.notify("WATCHDOG=1") is False
        notifier.ready()
        notifier.watchdog()


def test_a_notify_socket_nobody_listens_on_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone"))
    assert notifier.enabled
    assert notifier.notify("WATCHDOG=1") is False
    notifier.watchdog()
    notifier.close()
