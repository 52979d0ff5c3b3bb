"""Results directory names carry no `:` (Windows and macOS tools, scp and URLs read it as something else),
sort by time, and keep the `-1` … `-999` suffixes when a millisecond is taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_runner.engine.report.results_dir import MAX_SUFFIX, ResultsError, results_dir, stamp

NOW = 1_790_000_123_456


def test_a_name_is_utc_to_the_millisecond_without_a_colon() -> None:
    assert stamp(NOW) == "2026-09-21T14-15-23.456Z"
    assert stamp(0) == "1970-01-01T00-00-00.000Z"
    assert ":" not in stamp(NOW)
    later = [stamp(NOW + step) for step in (0, 1, 999, 1_000, 60_000, 3_600_000)]
    assert later == sorted(later)


def test_a_taken_name_gets_a_suffix_and_never_a_colon(tmp_path: Path) -> None:
    made = [results_dir(tmp_path, NOW) for _ in range(3)]
    assert [path.name for path in made] == [stamp(NOW), f"{stamp(NOW)}-1", f"{stamp(NOW)}-2"]
    assert all(":" not in path.name and path.is_dir() for path in made)


def test_when_every_suffix_is_taken_it_says_so(tmp_path: Path) -> None:
    name = stamp(NOW)
    (tmp_path / name).mkdir()
    for suffix in range(1, MAX_SUFFIX + 1):
        (tmp_path / f"{name}-{suffix}").mkdir()
    with pytest.raises(ResultsError, match=f"no free results directory name for {name}"):
        results_dir(tmp_path, NOW)
