"""`eval-runner serve` with `EVAL_RUNNER_METRICS_LISTEN`: a scrape during a run shows the slots in use, what
was refused and accepted, and the relay proven; and nothing scraped holds a key, a token or an id.

A real `serve` process (embedded relay, the stand-in agent in real sandboxes, the stand-in door), a trainer
over the relay, and `/metrics` fetched over HTTP as `curl` would, read with prometheus-client's parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eval_runner.contracts.strict_json import JsonValue
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.claims import key_name, key_of
from eval_runner.stand_ins.door import StandInDoor
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, free_port, runner_env, serving
from tests.support.stalling_run import definition, stalled
from tests.support.trainer_side import Trainer, asking_case, catalog_tool, draft, run_input

WORD = re.compile(r"[a-z][a-z_]{0,39}")


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def refused_at_once() -> dict[str, JsonValue]:
    found = definition()
    return run_input(found, draft(catalog_tool(found), [asking_case("shell", ["read", "exec"])]))


def sample_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_a_scrape_during_a_run_shows_the_slots_in_use_and_no_secret(tmp_path: Path, temp_root: Path) -> None:
    phone = SecretKey.generate()
    trainer_key = phone.public_key().to_hex()
    listen = f"127.0.0.1:{free_port()}"
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path,
            temp_root,
            door_url=door.url,
            listen="127.0.0.1:0",
            EVAL_RUNNER_CONCURRENCY="1",
            EVAL_RUNNER_METRICS_LISTEN=listen,
            EVAL_RUNNER_PROBE_MS="500",
        )
        async with serving(env) as process, aiohttp.ClientSession() as http:
            assert await process.wait_for("metrics http://") == f"metrics http://{listen}/metrics and /healthz"
            runner, url = await process.runner(), await process.url()
            async with Trainer(url, runner, phone) as trainer:
                refused, _ = await trainer.run(refused_at_once(), "req-refused")
                assert (await trainer.result(refused)).code == "not_admitted"
                event, _ = await stalled(trainer)  # the greeting's two runs done; the stalling one in its sandbox
                await door.answered(3)
                await process.wait_for(f"running {key_name(key_of(runner, trainer_key, 'req-stalled-300', 1))}")
                async with http.get(f"http://{listen}/metrics") as response:
                    assert response.status == 200
                    text = await response.text()
                async with http.get(f"http://{listen}/healthz") as response:
                    assert response.status == 200
                assert trainer.sent[event.id].results == [], "the scrape was taken during the run"

    values = sample_values(text)

    def value(name: str, **labels: str) -> float:
        return values.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("eval_runner_suite_slots") == 2
    assert value("eval_runner_suite_slots_in_use") == 1
    assert value("eval_runner_run_slots") == 2  # 2 suites x 1 run at once
    assert value("eval_runner_run_slots_in_use") == 1  # the stalling run, in its sandbox
    assert value("eval_runner_queued_runs") == 0
    assert value("eval_runner_requests_total", outcome="refused", code="not_admitted") == 1
    assert value("eval_runner_refusals_total", code="not_admitted") == 1
    assert value("eval_runner_time_to_accepted_seconds_count") == 1
    assert value("eval_runner_runs_total", outcome="completed") == 0  # still running
    assert value("eval_runner_relay_state", eval_runner_relay_state="subscribed") == 1
    assert value("eval_runner_blob_errors_total", operation="fetch", code="unavailable") == 0

    # No key, token or id anywhere in what was scraped, and every label value is a word of ours.
    runner_secret = (tmp_path / "state" / "runner-key").read_text().strip()
    for secret in (DOOR_KEY, runner_secret, runner, trainer_key, event.id, refused.id):
        assert secret not in text
        assert secret[:12] not in text
    for (name, labels), _ in values.items():
        for label_name, label_value in labels:
            assert label_name == "le" or WORD.fullmatch(label_value), (name, label_name, label_value)
