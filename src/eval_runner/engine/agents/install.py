"""Where the real agents are installed: `scripts/agents` puts the pinned npm packages of Claude Code and
Codex (`deploy/agents/package-lock.json`) in a cache directory, and both ship native binaries, so no
node is needed at run time and the sandbox runs the binary itself.

The cache is `$EVAL_RUNNER_AGENTS_CACHE`, else `/var/cache/eval-runner/agents` for root (the sandbox's
uid must reach the binary, and root's home is closed to it), else `$XDG_CACHE_HOME/eval-runner/agents`
(`~/.cache`). Both packages install their binary as a per-platform optional dependency; the paths below
are those packages' own layout.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CACHE_ENV = "EVAL_RUNNER_AGENTS_CACHE"
ROOT_CACHE = Path("/var/cache/eval-runner/agents")
_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_TRIPLE = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    if os.geteuid() == 0:
        return ROOT_CACHE
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "eval-runner" / "agents"


def _arch() -> str:
    return _ARCH.get(platform.machine().lower(), platform.machine().lower())


def claude_binary(cache: Path | None = None) -> Path:
    """Claude Code's native binary (`@anthropic-ai/claude-code-linux-<arch>/claude`)."""
    root = (cache or cache_dir()) / "node_modules" / "@anthropic-ai"
    return root / f"claude-code-linux-{_arch()}" / "claude"


def codex_binary(cache: Path | None = None) -> Path:
    """Codex's native binary (`@openai/codex-linux-<arch>/vendor/<triple>/bin/codex`, statically linked)."""
    arch = _arch()
    root = (cache or cache_dir()) / "node_modules" / "@openai" / f"codex-linux-{arch}"
    return root / "vendor" / _TRIPLE.get(arch, arch) / "bin" / "codex"


def installed(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
