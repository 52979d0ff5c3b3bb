"""A catalog tool this runner publishes: a copy of `examples/codebase-brief` whose package record names the
runner's key as publisher (and another name, so its lines are told apart from the example's), as the
reference's hosted test makes one. Also a runner key written where `EVAL_RUNNER_KEY_FILE` can name it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Final

from eval_runner.nostr import SecretKey
from tests.support.paths import EXAMPLE

#: The name the runner-published copy goes by.
OURS: Final = "Codebase brief (runner)"
#: The example's own name; its package names the publisher `eval-runner examples`.
THEIRS: Final = "Codebase brief"
THEIRS_PUBLISHER: Final = "eval-runner examples"


def runner_published_copy(target: Path, runner: str, *, name: str = OURS) -> Path:
    """`examples/codebase-brief` copied to `target` with `publisher` = `runner` and `name` = `name`."""
    shutil.copytree(EXAMPLE, target)
    record = target / "package.json"
    package = json.loads(record.read_text(encoding="utf-8"))
    package.update(publisher=runner, name=name)
    record.write_text(json.dumps(package, indent=2) + "\n", encoding="utf-8")
    return target


def key_file(path: Path, secret: SecretKey) -> Path:
    """`secret` written as the runner key file (64 hex, mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secret.to_hex() + "\n", encoding="ascii")
    path.chmod(0o600)
    return path
