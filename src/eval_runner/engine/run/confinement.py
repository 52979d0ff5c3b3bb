"""The confinement probe: before any run, one sandbox in exactly the shape runs take proves the host can
confine (runner.md §13.5 probes `bwrap --ro-bind / / … /bin/sh -c :`; ours checks what we promise).

From inside, as the agent would be, it checks uid 65534 with no capabilities and no_new_privs, a network
of loopback only (a host port on 127.0.0.1 must not answer), a read-only `/`, `/usr` and `/dev`, a
writable run directory under the given temp root (so bind sources are reachable by the sandbox's uid),
and a door bridge that relays to a Unix socket. Anything else is `Unconfined(reason)`: every run on
such a host ends `errored(unconfined_host)` and nothing ever runs unconfined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

from eval_runner.engine.run.confined import run_confined
from eval_runner.engine.run.sandbox import Confinement, Launch, Stop, Unconfined, host_shape

#: The port the probe's door is offered at inside its sandbox.
_DOOR_PORT = 8400


async def probe(temp_root: Path, *, bwrap: str | None = None) -> Confinement | Unconfined:
    """Start one sandbox in the exact shape runs take, under `temp_root`, and check from inside that it
    holds (see the module docstring). `bwrap` overrides where the backend is looked for."""
    shape = host_shape(bwrap)
    if isinstance(shape, Unconfined):
        return shape
    try:
        root = Path(tempfile.mkdtemp(prefix="oa-probe-", dir=temp_root)).resolve()
    except OSError as exc:
        return Unconfined(f"cannot make a sandbox directory in {temp_root}: {exc.strerror}")
    host = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server: asyncio.AbstractServer | None = None
    try:
        os.chmod(root, 0o755)  # noqa: S103 - the sandbox user must reach its run directory
        out, door = root / "out", root / "door"
        out.mkdir(mode=0o700)
        door.mkdir(mode=0o755)
        if (owner := shape.owner()) is not None:
            os.chown(out, *owner)
        host.bind(("127.0.0.1", 0))
        host.listen()
        socket_path = door / "probe"
        server = await asyncio.start_unix_server(_answer_probe, path=str(socket_path))
        os.chmod(socket_path, 0o666)  # noqa: S103 - the sandbox's uid connects; the directory is the run's
        door_port = _DOOR_PORT
        launch = Launch(
            root=root,
            command=(shape.python, "-I", "-S", "-c", _PROBE, str(host.getsockname()[1]), str(door_port), str(out)),
            cwd=root,
            stdout=out / "stdout",
            stderr=out / "stderr",
            home=root,
            writable=(out,),
            doors=((door_port, socket_path),),
            deadline_seconds=30.0,
        )
        ended = await run_confined(shape, launch, cancel=asyncio.Event())
    except OSError as exc:
        return Unconfined(f"bubblewrap is inoperable: {exc}")
    finally:
        host.close()
        if server is not None:
            server.close()
        shutil.rmtree(root, ignore_errors=True)
    if ended.stop is Stop.EXITED and ended.exit_code == 0 and ended.stdout == b"confined\n":
        return shape
    said = (ended.stdout or ended.stderr).decode("utf-8", "replace").strip().splitlines()
    return Unconfined(f"bubblewrap is inoperable: {said[-1] if said else ended.status or 'no answer'}")


async def _answer_probe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"door\n")
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


# Runs inside the probe sandbox as its "agent": stdlib C modules only, prints `confined` or the faults.
_PROBE = r"""
import os, sys, _socket
host_port, door_port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
faults = []
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
if status.get("CapEff") != "0000000000000000":
    faults.append("capabilities are not dropped")
if status.get("NoNewPrivs") != "1":
    faults.append("no_new_privs is not set")
if os.getuid() != 65534:
    faults.append("the sandbox user is not 65534")
links = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
if links != ["lo"]:
    faults.append("the network is not off: " + " ".join(links))
s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(("127.0.0.1", host_port))
    faults.append("a host port answered")
except OSError:
    pass
s.close()
for path in ("/probe", "/usr/probe", "/dev/probe"):
    try:
        open(path, "x").close()
        faults.append(path + " is writable")
    except OSError:
        pass
try:
    open(out + "/probe", "x").close()
except OSError as exc:
    faults.append("the run directory is not writable: " + str(exc.strerror))
try:
    d = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    d.settimeout(5)
    d.connect(("127.0.0.1", door_port))
    reply = d.recv(16)
    d.close()
    if reply != b"door\n":
        faults.append("the door bridge relayed " + repr(reply))
except OSError as exc:
    faults.append("the door bridge failed: " + str(exc))
print("; ".join(faults) or "confined")
"""
