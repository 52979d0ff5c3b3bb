"""Running a grader's regular expression without letting it hang the runner, and `file_exists` globs.

The reference compiles graders' patterns with Rust's `regex`, which runs in linear time. Python's `re`
backtracks, and a pattern such as `(a+)+$` over a few dozen characters can run for hours while holding
the GIL, so neither a thread nor a signal can stop it inside the runner. Every match therefore runs in a
short-lived child interpreter (`python -I -S`, no environment, input on stdin, a count on stdout) that is
killed when it outlives `PATTERN_SECONDS`; the grader then fails with that reason, never passes. The
input is bounded too: a focus text over `MAX_PATTERN_TEXT_BYTES` (UTF-8) fails the grader rather than
being cut, because a cut text could turn a `not_contains` into a pass.

Counting follows `re.finditer` (non-overlapping, empty matches included), the closest Python has to the
reference's `find_iter`. Known differences from Rust's `regex` that a pattern can observe: Python's `$`
without `m` also matches before a final newline (Rust's does not), and Python's empty-match stepping can
differ after a non-empty match. A pattern Python cannot compile is refused when the case loads.

`glob_matches` is the reference's small glob language: `*` any run of characters but `/`, `**` any run,
`**/` nothing or any run ending in `/`, `?` one character but `/`; everything else is literal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

PATTERN_SECONDS = 10.0
MAX_PATTERN_TEXT_BYTES = 8 * 1024 * 1024
_FLAGS = "imsx"

_WORKER = """
import json, re, sys
job = json.loads(sys.stdin.buffer.read())
flags = 0
for flag in job["flags"]:
    flags |= {"i": re.I, "m": re.M, "s": re.S, "x": re.X}[flag]
pattern = re.compile(job["pattern"], flags)
if job["mode"] == "count":
    found = 0
    for _ in pattern.finditer(job["texts"][0]):
        found += 1
else:
    found = sum(1 for text in job["texts"] if pattern.search(text) is not None)
sys.stdout.write(str(found))
"""


class PatternError(Exception):
    """A pattern could not be run to the end; the message is the reason its grader fails with."""


@dataclass(frozen=True, slots=True)
class PatternRunner:
    """Runs patterns in a killable child interpreter, `seconds` at most each."""

    seconds: float = PATTERN_SECONDS
    max_text_bytes: int = MAX_PATTERN_TEXT_BYTES

    async def count(self, pattern: str, flags: str, text: str) -> int:
        """Non-overlapping matches of `pattern` in `text`."""
        return await self._run("count", pattern, flags, [text])

    async def matching(self, pattern: str, flags: str, texts: Sequence[str]) -> int:
        """How many of `texts` hold a match of `pattern` (searched, not anchored)."""
        if not texts:
            return 0
        return await self._run("search", pattern, flags, list(texts))

    async def _run(self, mode: str, pattern: str, flags: str, texts: list[str]) -> int:
        if any(flag not in _FLAGS for flag in flags):
            raise PatternError(f"unknown regex flags {flags!r}")
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
        if size > self.max_text_bytes:
            raise PatternError(f"the text is {size} bytes; a pattern reads at most {self.max_text_bytes} bytes")
        job = json.dumps({"mode": mode, "pattern": pattern, "flags": flags, "texts": texts}).encode("ascii")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _WORKER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={},
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(job), self.seconds)
        except TimeoutError:
            raise PatternError(
                f"the pattern ran past {self.seconds:g} s and was stopped (Python's re can backtrack without bound)"
            ) from None
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if process.returncode != 0 or not out.strip().isdigit():
            last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise PatternError(f"the pattern could not be run ({last[0][:200]})")
        return int(out)


# ------------------------------------------------------------------------------------------------------ glob


def glob_matches(pattern: str, text: str) -> bool:
    """Whether all of `text` matches the glob `pattern` (module docstring). Linear in the text per token:
    `after[j]` says whether the tokens after the current one match `text[j:]`."""
    size = len(text)
    after = [False] * size + [True]
    for part in reversed(_tokens(pattern)):
        here = [False] * (size + 1)
        if part == "*":
            here[size] = after[size]
            for j in range(size - 1, -1, -1):
                here[j] = after[j] or (text[j] != "/" and here[j + 1])
        elif part == "**":
            seen = False
            for j in range(size, -1, -1):
                seen = seen or after[j]
                here[j] = seen
        elif part == "**/":
            seen = False
            here[size] = after[size]
            for j in range(size - 1, -1, -1):
                seen = seen or (text[j] == "/" and after[j + 1])
                here[j] = after[j] or seen
        elif part == "?":
            for j in range(size):
                here[j] = text[j] != "/" and after[j + 1]
        else:
            for j in range(size):
                here[j] = text[j] == part[1:] and after[j + 1]
        after = here
    return after[0]


def _tokens(pattern: str) -> tuple[str, ...]:
    """`*`, `**`, `**/`, `?`, or `=<c>` for a literal character."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("**/")
            index += 3
        elif pattern.startswith("**", index):
            out.append("**")
            index += 2
        elif pattern[index] in "*?":
            out.append(pattern[index])
            index += 1
        else:
            out.append("=" + pattern[index])
            index += 1
    return tuple(out)
