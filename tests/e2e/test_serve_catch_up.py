"""Catch-up: a request published while the runner is down is answered once it is back, and a request it
had already run, delivered again by the same catch-up, is not run again.

The relay is external here (`EVAL_RUNNER_RELAY`), one that keeps ephemeral events
(`tests.support.stand_in_storing_relay`): with a relay that keeps none, nothing published in the gap could
be delivered at all. The trainer stays connected and subscribed across the runner's stop and start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.claims import key_name, key_of
from eval_runner.service.relay.liveness import REQUEST_WINDOW
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, runner_env, serving
from tests.support.stand_in_storing_relay import StandInStoringRelay
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def greeting_run() -> dict[str, JsonValue]:
    found = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    return run_input(found, draft(catalog_tool(found), [example_case("greeting")]), runs=1)


def write_key(path: Path) -> SecretKey:
    secret = SecretKey.generate()
    path.parent.mkdir(parents=True)
    path.write_text(secret.to_hex() + "\n")
    path.chmod(0o600)
    return secret


async def test_a_request_published_while_the_runner_is_down_is_answered_after_it_starts(
    tmp_path: Path, temp_root: Path
) -> None:
    phone = SecretKey.generate()
    principal = phone.public_key().to_hex()
    secret = write_key(tmp_path / "keys" / "runner-key")
    runner = secret.public_key().to_hex()
    async with StandInStoringRelay() as relay, StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path, temp_root, door_url=door.url, relay=relay.url, key_file=tmp_path / "keys" / "runner-key"
        )
        async with Trainer(relay.url, runner, phone) as trainer:
            async with serving(env) as first:
                assert await first.runner() == runner
                assert await first.url() == relay.url
                before, _ = await trainer.run(greeting_run(), "req-before")
                assert (await trainer.result(before)).outcome == "completed"
                assert await first.terminate() == 0

            # Nobody listens: the relay keeps the request.
            during, _ = await trainer.run(greeting_run(), "req-during")
            assert during.id in {event.id for event in relay.events}
            asked = len(relay.subscribed)

            async with serving(env) as second:
                result = await trainer.result(during)
                assert result.outcome == "completed"
                assert trainer.sent[during.id].accepted, "the request was admitted, not only answered"
                during_key = key_name(key_of(runner, principal, "req-during", 1))
                before_key = key_name(key_of(runner, principal, "req-before", 1))
                await second.wait_for(f"finished {during_key}")
                # The catch-up delivers the earlier request again; the ledger answers it and runs nothing.
                await trainer.result(before, count=2)
                assert [line.split()[1] for line in second.matching("running ")] == [during_key]
                assert before_key not in second.text
            # The first subscription after the restart asks from the newest request the ledger holds,
            # minus the open window, so nothing published in the gap is missed.
            [first_jobs, *_] = [filters for sub_id, filters in relay.subscribed[asked:] if sub_id == "jobs"]
            assert first_jobs[0].since == before.created_at - REQUEST_WINDOW
