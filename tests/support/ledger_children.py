"""What a durability test's child process does with the ledger: it opens the same SQLite file as the test and
is SIGKILLed (by the parent, or by itself the instant a call returns), so nothing it did is flushed by a clean
exit. Run as `python -c "...; from tests.support.ledger_children import child; child(sys.argv[1:])"`.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.support.ledger_requests import dispatch, event, execute, failed, open_ledger


def child(argv: list[str]) -> None:
    """A child process's part: `<state> <worker> <mode> [count]`."""
    state, worker, mode = Path(argv[0]), argv[1], argv[2]
    ledger = open_ledger(state, worker)
    if mode == "intend-and-wait":
        claim = dispatch(ledger, execute())
        print(claim.key, flush=True)
        sys.stdin.read()
    elif mode == "finish-and-die":
        claim = dispatch(ledger, execute())
        ledger.record_progress(claim.key, 0, "queued")
        ledger.finish(claim.key, "failed", failed(claim))
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "intend-and-die":
        dispatch(ledger, execute())
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "many":
        for n in range(int(argv[3])):
            claim = dispatch(ledger, execute(f"req-{n}"), event(f"{worker}-{n}"))
            ledger.record_progress(claim.key, 0, "queued")
            ledger.finish(claim.key, "failed", failed(claim))
        ledger.close()
