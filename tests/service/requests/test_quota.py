"""The day's counts and the emergency brake (runner.md §18, §21.7): no brake takes everything and still
counts; a set brake refuses with the fixed digit-free message; checks take turns but never runs; refunds,
restarts and the next UTC day; `quota.json` written whole under concurrent writers."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from eval_runner.service.requests.quota import (
    BRAKED,
    DAY_SECONDS,
    DayCounts,
    OverQuotaError,
    Quota,
    Ticket,
    day_of,
    write_atomic,
)
from eval_runner.service.settings import Limits

NOON = 20_000 * DAY_SECONDS + 43_200
BRAKE = Limits(runs_per_trainer=3, turns_per_day=200)


def quota_in(tmp_path: Path) -> Quota:
    return Quota(tmp_path / "quota.json")


def test_with_no_brake_a_hundred_runs_are_all_taken(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    assert not Limits().braked
    for _ in range(100):
        quota.take("alice", 48, check=False, now=NOON, limits=Limits())
    today = quota.today(NOON)
    assert (today.runs_of("alice"), today.turns) == (100, 4_800)
    saved = json.loads((tmp_path / "quota.json").read_text())
    assert saved == {"day": 20_000, "runs": {"alice": 100}, "turns": 4_800}


def test_the_brake_holds_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    quota = Quota(path)
    for _ in range(3):
        quota.take("alice", 48, check=False, now=NOON, limits=BRAKE)
    with pytest.raises(OverQuotaError) as refused:
        quota.take("alice", 6, check=False, now=NOON, limits=BRAKE)
    assert refused.value.code == "over_quota"
    assert refused.value.message == BRAKED == "the hosted runner can't take this run right now; try again later"
    assert str(refused.value) == BRAKED
    assert not any(char.isdigit() for char in BRAKED)
    # A check isn't a run, even for a trainer at the runs brake.
    check = quota.take("alice", 6, check=True, now=NOON, limits=BRAKE)
    assert check == Ticket(20_000, "alice", False, 6)
    assert quota.today(NOON).runs_of("alice") == 3
    # The day's turns: 150 used, 50 left.
    with pytest.raises(OverQuotaError):
        quota.take("bob", 51, check=False, now=NOON, limits=BRAKE)
    bob = quota.take("bob", 50, check=False, now=NOON, limits=BRAKE)
    quota.give_back(bob)
    quota.give_back(check)
    assert quota.today(NOON).turns == 144
    assert quota.today(NOON).runs == {"alice": 3, "bob": 0}
    # A restart reads the same day.
    reopened = Quota(path)
    assert reopened.today(NOON) == quota.today(NOON)
    with pytest.raises(OverQuotaError):
        reopened.take("alice", 1, check=False, now=NOON, limits=BRAKE)
    # The next UTC day starts empty.
    reopened.take("alice", 48, check=False, now=NOON + DAY_SECONDS, limits=BRAKE)
    assert reopened.today(NOON + DAY_SECONDS) == DayCounts(20_001, {"alice": 1}, 48)


def test_a_refusal_takes_nothing(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    limits = Limits(runs_per_trainer=1, turns_per_day=10)
    quota.take("alice", 4, check=False, now=NOON, limits=limits)
    before = quota.today(NOON)
    for trainer, turns, check in [("alice", 1, False), ("bob", 7, False), ("bob", 7, True)]:
        with pytest.raises(OverQuotaError):
            quota.take(trainer, turns, check=check, now=NOON, limits=limits)
    assert quota.today(NOON) == before


def test_a_check_takes_turns_and_the_turns_brake_holds_it(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    limits = Limits(turns_per_day=12)
    quota.take("erin", 12, check=True, now=NOON, limits=limits)
    assert quota.today(NOON) == DayCounts(20_000, {}, 12)
    with pytest.raises(OverQuotaError):
        quota.take("erin", 1, check=True, now=NOON, limits=limits)


def test_only_one_brake_set(tmp_path: Path) -> None:
    runs_only = quota_in(tmp_path)
    for _ in range(2):
        runs_only.take("a", 10_000, check=False, now=NOON, limits=Limits(runs_per_trainer=2))
    with pytest.raises(OverQuotaError):
        runs_only.take("a", 0, check=False, now=NOON, limits=Limits(runs_per_trainer=2))
    runs_only.take("b", 10_000, check=False, now=NOON, limits=Limits(runs_per_trainer=2))


def test_give_back_is_saturating_and_only_the_same_day(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    ticket = quota.take("alice", 8, check=False, now=NOON, limits=Limits())
    quota.give_back(ticket)
    quota.give_back(ticket)
    assert quota.today(NOON) == DayCounts(20_000, {"alice": 0}, 0)
    yesterday = quota.take("alice", 8, check=False, now=NOON, limits=Limits())
    quota.take("alice", 5, check=False, now=NOON + DAY_SECONDS, limits=Limits())
    quota.give_back(yesterday)
    assert quota.today(NOON + DAY_SECONDS) == DayCounts(20_001, {"alice": 1}, 5)


def test_a_ticket_for_a_trainer_never_counted_gives_back_only_turns(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    quota.take("alice", 5, check=False, now=NOON, limits=Limits())
    quota.give_back(Ticket(20_000, "mallory", True, 2))
    assert quota.today(NOON) == DayCounts(20_000, {"alice": 1}, 3)


def test_the_day_is_utc_unix_days() -> None:
    assert day_of(0) == 0
    assert day_of(DAY_SECONDS - 1) == 0
    assert day_of(DAY_SECONDS) == 1
    assert day_of(NOON + 0.9) == 20_000


def test_quota_json_is_pretty_sorted_and_private(tmp_path: Path) -> None:
    quota = quota_in(tmp_path)
    quota.take("bob", 2, check=False, now=NOON, limits=Limits())
    quota.take("alice", 4, check=False, now=NOON, limits=Limits())
    path = tmp_path / "quota.json"
    assert path.read_text() == '{\n  "day": 20000,\n  "runs": {\n    "alice": 1,\n    "bob": 1\n  },\n  "turns": 6\n}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["quota.json"]


@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"day": -1, "runs": {}, "turns": 0}', '{"day": 1, "runs": {"a": "x"}, "turns": 0}']
)
def test_a_file_that_is_not_a_days_counts_starts_empty_and_says_so(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quota.json"
    path.write_text(text)
    caplog.set_level(logging.INFO, logger="eval_runner")
    quota = Quota(path)
    assert quota.today(NOON) == DayCounts(20_000)
    assert caplog.messages == [f"quota: {path}: not a day's counts; starting from none"]


def test_a_failed_save_only_logs_and_the_brake_still_holds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "missing" / "quota.json"
    caplog.set_level(logging.INFO, logger="eval_runner")
    quota = Quota(path)
    ticket = quota.take("alice", 3, check=False, now=NOON, limits=Limits(runs_per_trainer=1))
    assert ticket == Ticket(20_000, "alice", True, 3)
    assert caplog.messages == [f"quota: {path}: No such file or directory"]
    with pytest.raises(OverQuotaError):
        quota.take("alice", 3, check=False, now=NOON, limits=Limits(runs_per_trainer=1))


def test_negative_turns_are_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never negative"):
        quota_in(tmp_path).take("alice", -1, check=False, now=NOON, limits=Limits())


def test_concurrent_takes_count_exactly_and_the_file_is_always_whole(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    quota = Quota(path)
    quota.take("seed", 0, check=False, now=NOON, limits=Limits())
    done = threading.Event()
    torn: list[str] = []

    def read_continuously() -> None:
        while not done.is_set():
            text = path.read_text()
            try:
                json.loads(text)
            except ValueError:
                torn.append(text)

    def take(trainer: str) -> None:
        for _ in range(25):
            quota.take(trainer, 1, check=False, now=NOON, limits=Limits())

    reader = threading.Thread(target=read_continuously)
    reader.start()
    workers = [threading.Thread(target=take, args=(f"t{index}",)) for index in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.set()
    reader.join()
    assert torn == []
    today = quota.today(NOON)
    assert today.turns == 400
    assert all(today.runs_of(f"t{index}") == 25 for index in range(16))
    assert Quota(path).today(NOON) == today
    assert os.listdir(tmp_path) == ["quota.json"]


def test_concurrent_atomic_writes_never_tear_or_collide(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    bodies = [bytes([65 + writer]) * (128 * 1024) for writer in range(16)]
    gate = threading.Barrier(16)

    def write(body: bytes) -> None:
        gate.wait()
        for _ in range(20):
            write_atomic(path, body)

    threads = [threading.Thread(target=write, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert path.read_bytes() in bodies
    assert os.listdir(tmp_path) == ["quota.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "quota.json"
    target.mkdir()  # a directory cannot be replaced by a file
    with pytest.raises(OSError, match="Is a directory"):
        write_atomic(target, b"{}")
    assert os.listdir(tmp_path) == ["quota.json"]
