"""The brake in a fleet: two runners on one PostgreSQL ledger count into the same day (a real database),
so a trainer's runs and the day's turns are braked fleet-wide, and no `quota.json` is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.requests.quota import OverQuotaError, Quota, SharedQuota, quota_for
from eval_runner.service.settings import Limits
from tests.support.ledger_requests import NOW, WORKER
from tests.support.postgres_server import PostgresServer

BRAKE = Limits(runs_per_trainer=3, turns_per_day=100)
NOON = 1_790_856_000


def test_two_runners_share_one_brake(postgres: PostgresServer, tmp_path: Path) -> None:
    url = postgres.fresh_schema()
    with (
        PostgresLedger.connect(url, tmp_path / "a", WORKER, NOW) as first,
        PostgresLedger.connect(url, tmp_path / "b", WORKER, NOW) as second,
    ):
        quotas = [quota_for(tmp_path / "a" / "quota.json", first), quota_for(tmp_path / "b" / "quota.json", second)]
        assert all(isinstance(quota, SharedQuota) for quota in quotas)
        tickets = [quotas[n % 2].take("alice", 10, check=False, now=NOON, limits=BRAKE) for n in range(3)]
        with pytest.raises(OverQuotaError):
            quotas[1].take("alice", 10, check=False, now=NOON, limits=BRAKE)
        quotas[0].take("alice", 10, check=True, now=NOON, limits=BRAKE)  # a check counts no run
        quotas[1].give_back(tickets[0])
        quotas[1].take("alice", 10, check=False, now=NOON, limits=BRAKE)
        counts = quotas[0].today(NOON)
        assert (counts.runs_of("alice"), counts.turns) == (3, 40)
        with pytest.raises(OverQuotaError):
            quotas[0].take("bob", 61, check=False, now=NOON, limits=BRAKE)
        assert quotas[1].today(NOON + 86_400).turns == 0
        assert not (tmp_path / "a" / "quota.json").exists()


def test_a_lone_runner_keeps_quota_json(tmp_path: Path) -> None:
    assert type(quota_for(tmp_path / "quota.json", object())) is Quota
