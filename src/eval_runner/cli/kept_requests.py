"""The requests `eval-runner trainer` keeps: one JSON record per request sent (`<request id>.json`, 0600), which
status, cancel and `--retransmit` read back, since job events are ephemeral and the relay keeps none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from eval_runner.contracts.strict_json import read
from eval_runner.trainer.client import Request, TrainerError

REQUESTS_ENV: Final = "EVAL_RUNNER_TRAINER_DIR"
REQUESTS_DEFAULT: Final = "$XDG_STATE_HOME/eval-runner/trainer"


def requests_dir(args: argparse.Namespace, environ: Mapping[str, str]) -> Path:
    if args.requests is not None:
        return Path(args.requests)
    if environ.get(REQUESTS_ENV):
        return Path(environ[REQUESTS_ENV])
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "eval-runner" / "trainer"


def keep(request: Request, directory: Path) -> Path:
    """Write the request record as `<request id>.json` (0600), whole or not at all."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{request.id}.json"
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{request.id}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(request.to_json(), handle, ensure_ascii=False, indent=2)
            handle.write("\n")
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return path


def kept(ident: str, directory: Path) -> Request:
    """The request kept under `ident`: its request id, or the id of an event that carried it."""
    named = directory / f"{ident}.json"
    candidates = [named] if "/" not in ident and named.is_file() else sorted(directory.glob("*.json"))
    for path in candidates:
        try:
            request = Request.from_json(read(path.read_bytes()))
        except (OSError, TrainerError, ValueError):
            continue
        if ident == request.id or any(event.id == ident for event in request.events):
            return request
    raise TrainerError("input", f"no request {ident} is kept in {directory}")
