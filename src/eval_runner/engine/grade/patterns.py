"""Running a grader's regular expression fast, close to the reference's meaning, and never without a bound;
and `file_exists` globs.

The reference runs graders' patterns under Rust's `regex` (linear time). Here a pattern runs under RE2 in
this process when RE2 compiles it after a small translation, else under Python's `re` in a killable
worker interpreter that a `PatternRunner` keeps, counting as Rust's `find_iter` does in both; the
translation, the counting, the bounds and the worker are in decisions.md ("Grader patterns under RE2").
A focus text over `MAX_PATTERN_TEXT_BYTES` fails the grader rather than being cut, because a cut text
could turn a `not_contains` into a pass. `glob_matches` is the reference's glob: `*` any run of
characters but `/`, `**` any run, `**/` nothing or any run ending in `/`, `?` one character but `/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from eval_runner.errors import EvalRunnerError

PATTERN_SECONDS = 10.0
MAX_PATTERN_TEXT_BYTES = 8 * 1024 * 1024
#: RE2 work (text bytes × program instructions) done on the event loop's own thread, in a thread of this
#: process, and beyond that in the worker. Measured worst cases are ~6 ns a unit, so a call on the loop
#: stays under ~6 ms (and ~4 KiB of text bounds the per-match cost) and one in a thread under ~0.2 s.
INLINE_WORK, INLINE_BYTES, IN_PROCESS_WORK = 1 << 20, 4096, 1 << 25
#: How long a new worker may take to start (imports), apart from any job's bound.
WORKER_START_SECONDS = 30.0
_FLAGS = "imsx"
_RE_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}

#: Rust's `\s` (White_Space) and `\w` (Alphabetic, M, Nd, Pc, Join_Control) as RE2 class members; the same
#: code points as regex-syntax's tables for every character RE2's Unicode tables know.
_SPACE = r"\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
_WORD = (
    r"\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}"
    r"\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}"
)
_WHITE_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)
_CONTROL_ESCAPES = {"a": 0x07, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_OPEN_MINIMUM = re.compile(r"\{,([0-9]*)\}")
_SURROGATE = re.compile("[\ud800-\udfff]")

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.never_capture = True


class PatternError(EvalRunnerError):
    """A pattern could not be run to the end; the message is the reason its grader fails with."""


class _UnsupportedError(EvalRunnerError):
    """The pattern uses Python syntax this module does not carry to RE2; Python's `re` runs it."""


# ---------------------------------------------------------------------------------------------- the runner


class PatternRunner:
    """Runs patterns, `seconds` at most each (module docstring). Use it as an async context manager, or
    call `aclose()`, to stop its worker; a later match starts a new one."""

    def __init__(self, seconds: float = PATTERN_SECONDS, max_text_bytes: int = MAX_PATTERN_TEXT_BYTES) -> None:
        self.seconds = seconds
        self.max_text_bytes = max_text_bytes
        self._worker: asyncio.subprocess.Process | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> PatternRunner:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    @property
    def worker_pid(self) -> int | None:
        """The worker's process id while one runs."""
        if self._worker is None or self._worker.returncode is not None:
            return None
        return self._worker.pid

    async def count(self, pattern: str, flags: str, text: str) -> int:
        """Non-overlapping matches of `pattern` in `text`, as Rust's `find_iter` counts them."""
        return await self._run("count", pattern, flags, [text])

    async def matching(self, pattern: str, flags: str, texts: Sequence[str]) -> int:
        """How many of `texts` hold a match of `pattern` (searched, not anchored)."""
        if not texts:
            return 0
        return await self._run("search", pattern, flags, list(texts))

    async def aclose(self) -> None:
        """Stops the worker, after the job it is running (if any)."""
        if self._worker is None:
            return
        if self._lock is None or self._loop is not asyncio.get_running_loop():
            self._discard()
            return
        async with self._lock:
            worker, self._worker = self._worker, None
            if worker is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
                await worker.wait()

    async def _run(self, mode: str, pattern: str, flags: str, texts: list[str]) -> int:
        if any(flag not in _FLAGS for flag in flags):
            raise PatternError(f"unknown regex flags {flags!r}")
        size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
        if size > self.max_text_bytes:
            raise PatternError(f"the text is {size} bytes; a pattern reads at most {self.max_text_bytes} bytes")
        job = job_for(mode, pattern, flags, texts)
        work = None if job.program is None else size * job.program
        if work is None or work > IN_PROCESS_WORK:
            return await self._in_worker(job)
        deadline = time.monotonic() + self.seconds

        def check(_: int) -> None:
            if time.monotonic() > deadline:
                raise PatternError(self._overrun(job))

        if work <= INLINE_WORK and size <= INLINE_BYTES:
            return answer(job, check)
        return await asyncio.to_thread(answer, job, check)

    async def _in_worker(self, job: Job) -> int:
        async with self._bound_lock():
            worker = self._worker
            if worker is None or worker.returncode is not None:
                worker = self._worker = await _start_worker()
            try:
                reply = await asyncio.wait_for(_exchange(worker, job.frame()), self.seconds)
            except TimeoutError:
                self._discard()
                await worker.wait()
                raise PatternError(self._overrun(job)) from None
            except (OSError, EOFError, ValueError):  # a dead pipe, a short read, a garbled answer
                self._discard()
                raise PatternError("the pattern could not be run (its interpreter stopped)") from None
            except BaseException:  # cancelled mid-job: the next answer on the pipe would be this one's
                self._discard()
                raise
        found = reply.get("found")
        if not isinstance(found, int):
            raise PatternError(f"the pattern could not be run ({str(reply.get('error'))[:200]})")
        return found

    def _overrun(self, job: Job) -> str:
        why = "Python's re can backtrack without bound" if job.engine == "re" else "RE2 is linear, not instant"
        return f"the pattern ran past {self.seconds:g} s and was stopped ({why})"

    def _bound_lock(self) -> asyncio.Lock:
        """The lock of the running loop; a worker started under another (closed) loop is dropped."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._discard()
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock

    def _discard(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.returncode is None:
            with contextlib.suppress(ProcessLookupError, RuntimeError):
                worker.kill()


# ------------------------------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class Job:
    """One match job: `count` or `search` mode, the engine (`re2` or `re`), the pattern with `x` already
    applied, the remaining flags (i m s), the texts, and the RE2 program's size when the engine is RE2."""

    mode: str
    engine: str
    source: str
    flags: str
    texts: tuple[str, ...]
    program: int | None = None

    def frame(self) -> bytes:
        body = {"mode": self.mode, "engine": self.engine, "source": self.source, "flags": self.flags}
        data = json.dumps({**body, "texts": self.texts}).encode("ascii")
        return len(data).to_bytes(4, "big") + data

    @classmethod
    def of_json(cls, data: bytes) -> Job:
        body = json.loads(data)
        return cls(body["mode"], body["engine"], body["source"], body["flags"], tuple(body["texts"]))


def job_for(mode: str, pattern: str, flags: str, texts: Sequence[str]) -> Job:
    """The job for a match: RE2 when it compiles the pattern and reads every text as Rust would, else `re`."""
    source = without_verbose(pattern) if "x" in flags else pattern
    rest = "".join(sorted(set(flags) - {"x"}))
    compiled = _re2_compiled(source, rest)
    if compiled is not None and all(_readable(text, compiled.ascii_only) for text in texts):
        return Job(mode, "re2", source, rest, tuple(texts), compiled.program)
    return Job(mode, "re", source, rest, tuple(texts))


def _readable(text: str, ascii_only: bool) -> bool:
    """Whether RE2 reads `text` as Rust's regex would: valid UTF-8, and ASCII for RE2's ASCII `\\b`."""
    return text.isascii() if ascii_only else _SURROGATE.search(text) is None


def answer(job: Job, check: Callable[[int], None] | None = None) -> int:
    """The job's count, or how many of its texts match; `check(done)` runs after each match or text and
    may raise to stop it. The same code answers in this process and in the worker."""
    searches: list[tuple[Callable[[int], tuple[int, int] | None], int, Callable[[int], int]]] = []
    if job.engine == "re2":
        compiled = _re2_compiled(job.source, job.flags)
        if compiled is None:
            raise PatternError("RE2 refused a pattern it compiled before")
        for text in job.texts:
            data = text.encode("utf-8")
            searches.append((functools.partial(_re2_span, compiled.regexp, data), len(data), _after_char(data)))
    else:
        flags = 0
        for flag in job.flags:
            flags |= _RE_FLAGS[flag]
        pattern = re.compile(job.source, flags)
        for text in job.texts:
            searches.append((functools.partial(_re_span, pattern, text), len(text), _next_index))
    if job.mode == "count":
        search, end, step = searches[0]
        return count_matches(search, end, step, check)
    found = 0
    for done, (search, _, _) in enumerate(searches, 1):
        found += search(0) is not None
        if check is not None:
            check(done)
    return found


def count_matches(
    search: Callable[[int], tuple[int, int] | None],
    end: int,
    step: Callable[[int], int],
    check: Callable[[int], None] | None = None,
) -> int:
    """Rust's `find_iter`, counted: `search(at)` is the leftmost match starting at or after `at` (the text
    before `at` still seen by `^`, `\\b` and look-behind); an empty match ending where the last match
    ended is skipped by searching again one character (`step`) further on."""
    found, at, last = 0, 0, -1
    while True:
        span = search(at)
        if span is None:
            return found
        if span[0] == span[1] == last:
            at = step(at)
            if at > end:
                return found
            span = search(at)
            if span is None:
                return found
        found += 1
        at = last = span[1]
        if check is not None:
            check(found)


def _re2_span(regexp: Any, data: bytes, at: int) -> tuple[int, int] | None:
    match = regexp.search(data, at)
    return None if match is None else (match.start(), match.end())


def _re_span(pattern: re.Pattern[str], text: str, at: int) -> tuple[int, int] | None:
    match = pattern.search(text, at)
    return None if match is None else match.span()


def _after_char(data: bytes) -> Callable[[int], int]:
    def step(at: int) -> int:
        at += 1
        while at < len(data) and data[at] & 0xC0 == 0x80:
            at += 1
        return at

    return step


def _next_index(at: int) -> int:
    return at + 1


# --------------------------------------------------------------------------------------------------- RE2


@dataclass(frozen=True, slots=True)
class _Compiled:
    regexp: Any
    program: int
    ascii_only: bool


@functools.lru_cache(maxsize=256)
def _re2_compiled(source: str, flags: str) -> _Compiled | None:
    """The pattern under RE2, or None when RE2 (or the translation) refuses it."""
    try:
        translated, ascii_only = re2_syntax(source)
    except _UnsupportedError:
        return None
    try:
        regexp = re2.compile(f"(?{flags}){translated}" if flags else translated, _OPTIONS)
    except re2.error:
        return None
    return _Compiled(regexp, max(1, int(regexp.programsize)), ascii_only)


def without_verbose(pattern: str) -> str:
    """The pattern with `x` applied by Rust's rules: White_Space and `#`-to-end-of-line comments dropped
    everywhere, character classes included; an escaped character (and Python's `\\N{...}`) stays."""
    out: list[str] = []
    index, size = 0, len(pattern)
    while index < size:
        char = pattern[index]
        if char == "\\":
            end = index + 2
            if pattern.startswith("N{", index + 1) and "}" in pattern[index:]:
                end = pattern.index("}", index) + 1
            out.append(pattern[index:end])
            index = end
        elif char in _WHITE_SPACE:
            index += 1
        elif char == "#":
            newline = pattern.find("\n", index)
            index = size if newline < 0 else newline + 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def re2_syntax(source: str) -> tuple[str, bool]:
    """The pattern (Python syntax, checked at load) in RE2 syntax with Rust's meaning, and whether it needs
    ASCII text (it has `\\b` or `\\B`). Raises `_UnsupportedError` for what only Python's `re` can run."""
    out: list[str] = []
    index, size = 0, len(source)
    in_class = class_start = ascii_only = False
    while index < size:
        char = source[index]
        if char == "\\":
            token, index, boundary = _escape(source, index, in_class)
            out.append(token)
            ascii_only |= boundary
            class_start = False
            continue
        if in_class:
            if source.startswith("[:", index) and source.find(":]", index + 2) >= 0:
                end = source.index(":]", index + 2) + 2  # an ASCII class, as RE2 and Rust read it
                out.append(source[index:end])
                index, class_start = end, False
                continue
            if char == "]" and not class_start:
                in_class = False
            out.append(char)
            index, class_start = index + 1, False
            continue
        if char == "[":
            opening = "[^" if source.startswith("[^", index) else "["
            out.append(opening)
            index += len(opening)
            in_class = class_start = True
            continue
        minimum = _OPEN_MINIMUM.match(source, index) if char == "{" else None
        if minimum is not None:
            out.append("{0," + minimum.group(1) + "}")
            index = minimum.end()
            continue
        out.append(char)
        index += 1
    return "".join(out), ascii_only


def _escape(source: str, index: int, in_class: bool) -> tuple[str, int, bool]:
    """One escape at `index` as RE2 syntax, the index after it, and whether it is a word boundary."""
    if index + 1 >= len(source):
        raise _UnsupportedError
    char = source[index + 1]
    after = index + 2
    if not (char.isascii() and char.isalnum()):
        return _literal(char), after, False
    if char in _CONTROL_ESCAPES:
        return _literal(chr(_CONTROL_ESCAPES[char])), after, False
    if char in _HEX_DIGITS:
        digits = source[after : after + _HEX_DIGITS[char]]
        if len(digits) != _HEX_DIGITS[char] or any(digit not in "0123456789abcdefABCDEF" for digit in digits):
            raise _UnsupportedError
        return f"\\x{{{int(digits, 16):X}}}", after + len(digits), False
    if char == "N" and source.startswith("{", after) and "}" in source[after:]:
        close = source.index("}", after)
        try:
            return _literal(unicodedata.lookup(source[after + 1 : close])), close + 1, False
        except KeyError:
            raise _UnsupportedError from None
    if char == "d":
        return r"\p{Nd}", after, False
    if char == "D":
        return r"\P{Nd}", after, False
    if char in "sw":
        members = _SPACE if char == "s" else _WORD
        return (members if in_class else f"[{members}]"), after, False
    if char in "SW" and not in_class:
        return f"[^{_SPACE if char == 'S' else _WORD}]", after, False
    if in_class:
        if char == "b":
            return _literal("\b"), after, False
        raise _UnsupportedError
    if char == "A":
        return r"\A", after, False
    if char == "Z":
        return r"\z", after, False
    if char in "bB":
        return f"\\{char}", after, True
    raise _UnsupportedError  # digits (octal or a back-reference), and letters Python refused at load


def _literal(char: str) -> str:
    return f"\\x{{{ord(char):X}}}"


# ------------------------------------------------------------------------------------------------ worker

_WORKER = "import sys; sys.path[:0] = sys.argv[1:]; from eval_runner.engine.grade.patterns import serve; serve()"


async def _start_worker() -> asyncio.subprocess.Process:
    """`python -I -S` with no environment; only this package and RE2's directory are on its path. Its
    start (~0.1 s, mostly imports) is awaited up to `WORKER_START_SECONDS`, outside any job's bound."""
    paths = [str(Path(__file__).resolve().parents[3]), str(Path(re2.__file__).resolve().parents[1])]  # src/, re2
    try:
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _WORKER,
            *paths,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={},
        )
    except OSError as error:
        raise PatternError(f"the pattern could not be run (no interpreter: {error})") from None
    try:
        ready = await asyncio.wait_for(_reply(worker), WORKER_START_SECONDS)
    except (TimeoutError, OSError, EOFError, ValueError):
        ready = {}
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        raise
    if ready.get("ready") is not True:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        await worker.wait()
        raise PatternError("the pattern could not be run (its interpreter did not start)")
    return worker


async def _exchange(worker: asyncio.subprocess.Process, frame: bytes) -> dict[str, object]:
    assert worker.stdin is not None
    worker.stdin.write(frame)
    await worker.stdin.drain()
    return await _reply(worker)


async def _reply(worker: asyncio.subprocess.Process) -> dict[str, object]:
    assert worker.stdout is not None
    try:
        head = await worker.stdout.readexactly(4)
        reply = json.loads(await worker.stdout.readexactly(int.from_bytes(head, "big")))
    except asyncio.IncompleteReadError:
        raise EOFError from None
    if not isinstance(reply, dict):
        raise ValueError("not an answer")
    return reply


def serve() -> None:
    """The worker's loop: `{"ready": true}` once, then a length-prefixed JSON job in, `{"found": n}` or
    `{"error": why}` out, until its stdin closes."""
    read, write = sys.stdin.buffer, sys.stdout.buffer
    reply: dict[str, object] = {"ready": True}
    while True:
        data = json.dumps(reply).encode("ascii")
        write.write(len(data).to_bytes(4, "big") + data)
        write.flush()
        head = read.read(4)
        if len(head) < 4:
            return
        try:
            reply = {"found": answer(Job.of_json(read.read(int.from_bytes(head, "big"))))}
        except Exception as error:  # any failure is the grader's reason
            reply = {"error": f"{type(error).__name__}: {error}"}


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
