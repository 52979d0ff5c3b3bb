"""Grader patterns (engine/grade/patterns.py): RE2 counts as Rust's `find_iter` does, the flags, `$` at the
very end, `x` by Rust's rules, the Python `re` worker for what RE2 refuses (reused, killed past the bound
and replaced, closed), RE2's linear time on an adversarial input, work too large for this process, and one
runner per suite.

Every expected count of a pattern Rust's `regex` accepts was checked against regex 1.13.1
(`Regex::new("(?<flags>)<pattern>")?.find_iter(text).count()`); where Python's `re.finditer` counts
otherwise, its count is in the comment.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from eval_runner import stand_ins
from eval_runner.engine import suite_run
from eval_runner.engine.grade.graders import grade_run
from eval_runner.engine.grade.patterns import (
    IN_PROCESS_WORK,
    INLINE_BYTES,
    PatternError,
    PatternRunner,
    job_for,
    re2_syntax,
    without_verbose,
)
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import resolve_extension
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root

AGENT = stand_ins.AGENT


@pytest.fixture
async def runner() -> AsyncIterator[PatternRunner]:
    async with PatternRunner() as patterns:
        yield patterns


def engine(pattern: str, flags: str, *texts: str) -> str:
    return job_for("count", pattern, flags, texts).engine


# ----------------------------------------------------------------------------------------- RE2 counts


@pytest.mark.parametrize(
    ("pattern", "flags", "text", "count"),
    [
        ("aa", "", "aaaaa", 2),
        ("", "", "abc", 4),
        ("", "", "é✓", 3),  # empty matches fall on characters, not bytes
        ("x*", "", "abxd", 4),  # Python 5: no empty match where a match just ended
        ("a*", "", "baaac", 3),  # Python 4
        ("a??", "", "aaa", 4),  # Python 7
        ("a|", "", "abc", 3),  # Python 4
        ("[a-c]*", "", "xaby", 3),  # Python 4
        ("a{,2}", "", "aaaaa", 3),  # Python's `{,2}` is `{0,2}`; Rust refuses it
        ("hello", "i", "HeLLo hello", 2),
        ("é", "i", "É é ✓", 2),
        ("(?i)k", "", "kK\u212a", 3),
        (".", "", "a\nb", 2),
        (".", "s", "a\nb", 3),
        ("^b", "", "a\nb", 0),
        ("^b", "m", "a\nb", 1),
        ("(?m)^", "", "a\n", 2),
        ("$", "m", "a\nb\n", 3),
        (r"\w+", "", "héllo wörld_1", 2),
        (r"\w", "", "‿\u0301Ⓐ\u200d-", 4),  # Pc, a mark, Other_Alphabetic, Join_Control; Python 0
        (r"\d+", "", "12 ٣٤ x", 2),
        (r"\s", "", "a\u00a0b\x0bc\x1cd\u3000", 3),  # White_Space, not \x1c; Python 4
        (r"[\w-]+", "", "naïve-café x", 2),
        (r"\S+", "", "a\u00a0b c", 3),
        (r"\bcat\b", "", "cat concat cat.", 2),
        ("[[:digit:]]+", "", "a1b22", 2),  # an ASCII class, as RE2 and Rust read it; Python 0
        ("[]a]", "", "a]", 2),
        ("[^]a]", "", "a]b", 1),
        (r"\x41\u0042", "", "ABAB", 2),
        (r"\.", "", "a.b.c", 2),
        (r"\N{GREEK SMALL LETTER ALPHA}", "", "αβα", 2),
    ],
)
async def test_re2_counts_as_rusts_find_iter(
    runner: PatternRunner, pattern: str, flags: str, text: str, count: int
) -> None:
    assert engine(pattern, flags, text) == "re2"
    assert await runner.count(pattern, flags, text) == count
    assert runner.worker_pid is None  # nothing left this process


@pytest.mark.parametrize(
    ("pattern", "flags", "text", "count"),
    [
        ("$", "", "ab\n", 1),  # Python 2: its `$` also matches before a final newline
        ("a$", "", "a\n", 0),  # Python 1
        ("a$", "m", "a\n", 1),
        (r"a\Z", "", "a\n", 0),  # Python's `\Z` is the very end too (Rust's `\z`)
    ],
)
async def test_dollar_without_m_matches_only_at_the_very_end(
    runner: PatternRunner, pattern: str, flags: str, text: str, count: int
) -> None:
    assert await runner.count(pattern, flags, text) == count


@pytest.mark.parametrize(
    ("pattern", "text", "count"),
    [
        ("a b # a comment\n c", "abc a b c", 1),
        ("[ a ]", "a a", 2),  # whitespace in a class is dropped too; Python 3
        (r"a\ b", "a b ab", 1),
        (r"a\#b # c", "a#b", 1),
        ("a{1, 2}", "aaa", 2),  # Python 0: to it `{1,2}` is literal
        ("a *", "aaa", 1),  # Python 2
        ("a\u00a0b", "ab", 1),  # White_Space, not only ASCII; Python 0
    ],
)
async def test_x_follows_rusts_rules(runner: PatternRunner, pattern: str, text: str, count: int) -> None:
    assert engine(pattern, "x", text) == "re2"
    assert await runner.count(pattern, "x", text) == count


def test_the_translation_to_re2_syntax() -> None:
    assert re2_syntax(r"a\Z") == (r"a\z", False)
    assert re2_syntax("a{,3}b{,}") == ("a{0,3}b{0,}", False)
    assert re2_syntax(r"\.\ [\b]") == (r"\x{2E}\x{20}[\x{8}]", False)
    assert re2_syntax(r"\bx\B")[1] is True
    assert re2_syntax(r"\d\D") == (r"\p{Nd}\P{Nd}", False)
    assert without_verbose("a b # c\n[ d ]\\ e\\#\\N{LATIN SMALL LETTER A}") == "ab[d]\\ e\\#\\N{LATIN SMALL LETTER A}"


async def test_searching_counts_the_inputs_that_match(runner: PatternRunner) -> None:
    assert await runner.matching("^b", "", ["ab", "bc", "b"]) == 2
    assert await runner.matching("b$", "", ["ab\n", "b"]) == 1
    assert await runner.matching("(?<=a)b", "", ["ab", "cb", "abb"]) == 2
    assert await runner.matching("x", "", []) == 0


# ------------------------------------------------------------------------------------ Python's re worker


@pytest.mark.parametrize(
    ("pattern", "text", "count"),
    [
        ("(?<=a)b", "abab cb", 2),
        (r"(a)\1", "aa bb aa", 2),
        ("(?!z)x*", "abxd", 4),  # counted as Rust would step, not as finditer (5)
        (r"[\S]+", "a b", 2),  # a negated Perl class inside a class has no RE2 spelling
        (r"\bcafé\b", "un café noir", 1),  # RE2's `\b` is ASCII-only, so a text that is not goes here
        ("a", "a\ud800a", 2),  # a lone surrogate is not UTF-8
    ],
)
async def test_what_re2_refuses_runs_in_the_worker(runner: PatternRunner, pattern: str, text: str, count: int) -> None:
    assert engine(pattern, "", text) == "re"
    assert await runner.count(pattern, "", text) == count
    assert runner.worker_pid is not None


async def test_the_worker_is_started_once_and_reused(runner: PatternRunner) -> None:
    assert runner.worker_pid is None
    assert await runner.count("(?<=a)b", "", "ab") == 1
    first = runner.worker_pid
    assert await runner.matching("(?=b)", "", ["ab", "c"]) == 1
    assert await runner.count(r"\bcat\b", "", "cat cat") == 2  # ASCII: RE2, in this process
    assert runner.worker_pid == first


async def test_a_catastrophic_pattern_in_the_worker_is_killed_and_the_worker_replaced() -> None:
    async with PatternRunner(seconds=0.5) as runner:
        assert await runner.count("(?<=a)b", "", "ab") == 1
        first = runner.worker_pid
        assert first is not None
        with pytest.raises(PatternError) as stopped:
            await runner.count("(?=a)(a+)+b", "", "a" * 40)
        reason = "the pattern ran past 0.5 s and was stopped (Python's re can backtrack without bound)"
        assert str(stopped.value) == reason
        assert runner.worker_pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)
        assert await runner.count("(?<=a)b", "", "abab") == 2
        assert runner.worker_pid not in (None, first)


async def test_a_pattern_that_fails_in_the_worker_fails_with_pythons_reason(runner: PatternRunner) -> None:
    with pytest.raises(PatternError, match=r"^the pattern could not be run \(error: look-behind requires fixed-width"):
        await runner.count("(?<=a+)b", "", "ab")
    assert await runner.count("(?<=a)b", "", "ab") == 1  # the worker lives on


async def test_closing_stops_the_worker_and_a_later_match_starts_another() -> None:
    runner = PatternRunner()
    assert await runner.count("(?<=a)b", "", "ab") == 1
    first = runner.worker_pid
    assert first is not None
    await runner.aclose()
    assert runner.worker_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)
    assert await runner.count("(?<=a)b", "", "ab") == 1
    assert runner.worker_pid not in (None, first)
    await runner.aclose()


def test_a_runner_closed_under_one_event_loop_works_under_the_next() -> None:
    runner = PatternRunner()

    async def once(text: str) -> tuple[int, int | None]:
        found, pid = await runner.count("(?<=a)b", "", text), runner.worker_pid
        await runner.aclose()
        return found, pid

    first = asyncio.run(once("ab"))
    second = asyncio.run(once("abab"))  # a new lock for the new loop, and a new worker
    assert (first[0], second[0]) == (1, 2)
    assert None not in (first[1], second[1])
    assert first[1] != second[1]
    assert runner.worker_pid is None


# ------------------------------------------------------------------------------------------ RE2's bounds


async def test_re2_runs_a_catastrophic_backtracking_pattern_in_linear_time(runner: PatternRunner) -> None:
    assert engine("(a+)+$", "", "a") == "re2"
    assert await runner.count("(a+)+$", "", "a" * 10_000 + "b") == 0
    assert await runner.count("(x+x+)+y", "", "x" * 10_000) == 0
    assert await runner.matching("^(a|aa)+$", "", ["a" * 5_000 + "!", "a" * 5_000]) == 1
    assert runner.worker_pid is None


async def test_a_text_over_a_few_kib_is_counted_in_a_thread(runner: PatternRunner) -> None:
    text = "a" * (INLINE_BYTES * 3)
    assert await runner.count("a", "", text) == INLINE_BYTES * 3
    assert runner.worker_pid is None


async def test_a_count_past_the_bound_in_this_process_is_stopped() -> None:
    runner = PatternRunner(seconds=1e-9)
    with pytest.raises(PatternError, match=r"^the pattern ran past 1e-09 s and was stopped \(RE2 is linear"):
        await runner.count("a", "", "a" * 100)


async def test_work_too_large_for_this_process_runs_under_re2_in_the_worker(runner: PatternRunner) -> None:
    pattern, text = "(?s:.{1000})+c", "ab" * 5_000 + "c"
    job = job_for("count", pattern, "", [text])
    assert job.engine == "re2"
    assert job.program is not None
    assert job.program * len(text) > IN_PROCESS_WORK
    assert await runner.count(pattern, "", text) == 1
    assert runner.worker_pid is not None
    slow = PatternRunner(seconds=0.3)  # one RE2 search of ~1 MiB here takes seconds
    with pytest.raises(PatternError, match=r"^the pattern ran past 0\.3 s and was stopped \(RE2 is linear"):
        await slow.count(pattern, "", "ab" * 512 * 1024)
    assert slow.worker_pid is None
    await slow.aclose()


# ----------------------------------------------------------------------------------------- one per suite


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


async def test_a_suite_grades_every_run_with_one_runner_and_closes_it(
    temp_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[PatternRunner] = []
    closed: list[PatternRunner] = []
    given: list[PatternRunner | None] = []

    class Recorded(PatternRunner):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

        async def aclose(self) -> None:
            closed.append(self)
            await super().aclose()

    async def graded(*args: Any, patterns: PatternRunner | None = None, **named: Any) -> Any:
        given.append(patterns)
        return await grade_run(*args, patterns=patterns, **named)

    monkeypatch.setattr(suite_run, "PatternRunner", Recorded)
    monkeypatch.setattr(suite_run, "grade_run", graded)
    unconfined = await probe(temp_root, bwrap="/nonexistent/bwrap")
    assert isinstance(unconfined, Unconfined)
    tool = resolve_extension(EXAMPLE)
    async with StandInDoor("door-key") as door:
        plan = suite_run.SuitePlan(
            suite=load_suite(EXAMPLE / "evals"),
            subject=tool.subject,
            agent=AGENT,
            door=suite_run.DoorSettings(door.url, "door-key", "stand-in"),
            author=suite_run.SuiteAuthor(tool.definition.author, "patterns-tests", "suite", "0" * 64),
            temp_root=temp_root,
            results_base=tmp_path / "results",
            runs=2,
            subject_definition=tool.record,
            hosted=False,
        )
        outcome = await suite_run.run_suite(plan, confinement=unconfined)
    assert len(made) == 1
    assert closed == made
    assert len(given) == len(outcome.built.attempts) > 1
    assert all(patterns is made[0] for patterns in given)
