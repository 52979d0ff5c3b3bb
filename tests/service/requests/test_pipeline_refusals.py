"""Refusals through the whole pipeline over a real relay: each answered at once with its code and words,
logged `refused …`, recorded as one usage line, and nothing reserved or run."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from eval_runner.contracts.errors import Code
from eval_runner.contracts.strict_json import JsonValue, digest_bytes
from eval_runner.nostr import Event
from eval_runner.service.ledger.claims import CONFLICT_MESSAGE, key_of
from eval_runner.service.requests.admission import CLOSED, NOT_A_CATALOG_TOOL, Admission, RunPlan
from eval_runner.service.requests.opening import OpenedExecute
from eval_runner.service.requests.pipeline import UNPLANNED
from eval_runner.service.requests.quota import BRAKED
from eval_runner.service.settings import Limits
from eval_runner.service.usage import By, Record, UsageArguments, usage_main
from tests.support.hosted_service import Service, hosted_service
from tests.support.trainer_side import (
    ResultBody,
    Trainer,
    asking_case,
    catalog_tool,
    draft,
    example_case,
    run_input,
)


def definition(service: Service) -> dict[str, JsonValue]:
    return service.catalog.tools[0].definition.to_json()


def catalog_run(service: Service, **options: JsonValue) -> dict[str, JsonValue]:
    found = definition(service)
    cases = options.pop("cases", None)
    listed = None if cases is None else list(cases)
    return run_input(found, draft(catalog_tool(found), listed), **options)


async def refused(
    service: Service, trainer: Trainer, event: Event, code: Code, message: str
) -> tuple[ResultBody, Record]:
    """The refusal answered to `event`, its log line and its usage record, each checked."""
    result = await trainer.result(event)
    assert (result.outcome, result.dispatched, result.code, result.message) == ("refused", False, code.value, message)
    assert (result.output, result.record, result.artifacts, result.spend) == (None, None, (), None)
    assert result.binding == trainer.sent[event.id].binding
    line = f"refused {event.id[:12]} from {trainer.pubkey[:12]}: {code}: {message}"
    assert line in service.logs.lines
    [record] = [record for record in service.usage() if record.request == event.id]
    assert (record.key, record.outcome, record.code, record.bytes_in) == (
        trainer.pubkey,
        "refused",
        code.value,
        len(event.content),
    )
    assert (record.tests, record.turns, record.verdict) == (None, None, None)
    return result, record


async def test_bad_requests_are_refused_with_their_codes_and_recorded(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        tool = service.catalog.tools[0]
        changed = {
            **definition(service),
            "artifact": {**tool.definition.artifact.to_json(), "digest": digest_bytes(b"x")},
        }
        event, _ = await trainer.run(run_input(changed, draft(catalog_tool(definition(service)))), "req-digest")
        _, record = await refused(service, trainer, event, Code.NOT_ADMITTED, NOT_A_CATALOG_TOOL)
        assert (record.action, record.subject, record.suite, record.runs) == ("run", tool.definition.id, "draft", 1)

        exec_cases = [example_case("greeting"), asking_case("shell", ["read", "exec"])]
        event, _ = await trainer.run(catalog_run(service, cases=exec_cases), "req-exec")
        message = "the test shell asks to run commands or reach the network, which the hosted runner never allows"
        await refused(service, trainer, event, Code.NOT_ADMITTED, message)

        event, _ = await trainer.run(catalog_run(service, runs=4), "req-runs", checked=False)
        _, record = await refused(
            service,
            trainer,
            event,
            Code.TOO_LARGE,
            "limit_exceeded: input.runs: the hosted runner runs at most 3 per arm",
        )
        assert (record.action, record.subject, record.suite, record.runs) == ("unread", None, None, None)

        nine = [example_case("greeting") | {"id": f"hello-{n}"} for n in range(9)]
        event, _ = await trainer.run(catalog_run(service, cases=nine), "req-nine", checked=False)
        message = "limit_exceeded: input.draft.cases: the hosted runner runs at most 8 tests, and this set has 9"
        await refused(service, trainer, event, Code.TOO_LARGE, message)

        # the relay refuses an expired event, so a request past its deadline is handed over directly
        late = trainer.body(catalog_run(service), "req-late", now=int(time.time()) - 3_601)
        event = trainer.execute_event(late)
        await service.deliver(event)
        await refused(service, trainer, event, Code.STALE, "the request's deadline has passed")

        assert service.suite.runs == 0
        assert service.ledger.claims() == ()
        assert [record.outcome for record in service.usage()] == ["refused"] * 5
        assert list((tmp_path / "tmp").iterdir()) == [], "no staging is left behind"

        # `eval-runner usage --by key --json` reads those lines back: one trainer, five refusals, no turns.
        out, err = io.StringIO(), io.StringIO()
        asked = UsageArguments(since=None, by=By.KEY, json=True, directory=service.state / "usage")
        code = usage_main(asked, stdout=out, stderr=err)
        assert (code, err.getvalue()) == (0, "")
        rows = json.loads(out.getvalue())
        assert rows == [
            {
                "group": trainer.pubkey,
                "jobs": 5,
                "completed": 0,
                "failed": 0,
                "refused": 5,
                "keys": 1,
                "turns": 0,
                "total_p50_ms": None,
            },
            {
                "group": "all",
                "jobs": 5,
                "completed": 0,
                "failed": 0,
                "refused": 5,
                "keys": 1,
                "turns": 0,
                "total_p50_ms": None,
            },
        ]


async def test_the_brake_refuses_over_quota_with_its_fixed_message(tmp_path: Path) -> None:
    async with (
        hosted_service(tmp_path, limits=Limits(runs_per_trainer=1)) as service,
        Trainer(service.url, service.runner) as trainer,
        Trainer(service.url, service.runner) as other,
    ):
        first, _ = await trainer.run(catalog_run(service), "req-first")
        assert (await trainer.result(first)).outcome == "completed"
        second, _ = await trainer.run(catalog_run(service), "req-second")
        _, record = await refused(service, trainer, second, Code.OVER_QUOTA, BRAKED)
        assert (record.action, record.runs) == ("run", 1)
        own, _ = await other.run(catalog_run(service), "req-first")
        assert (await other.result(own)).outcome == "completed", "the brake is per trainer"
        assert service.suite.runs == 2


async def test_a_request_id_used_for_another_body_is_an_idempotency_conflict(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        first, body = await trainer.run(catalog_run(service), "req-same")
        original = await trainer.result(first)
        other, _ = await trainer.run(catalog_run(service, runs=2), "req-same")
        await refused(service, trainer, other, Code.IDEMPOTENCY_CONFLICT, CONFLICT_MESSAGE)
        again = trainer.execute_event(body)
        await trainer.publish(again)
        assert await trainer.result(again) == original, "the first body still gets its recorded answer"
        claim = service.ledger.lookup(key_of(service.runner, trainer.pubkey, "req-same", 1))
        assert claim is not None
        assert claim.aliases == (first.id, again.id)
        assert service.suite.runs == 1


async def test_a_closed_switch_refuses_new_runs_and_reopens(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        service.close_admission()
        closed, _ = await trainer.run(catalog_run(service), "req-closed")
        _, record = await refused(service, trainer, closed, Code.NOT_ADMITTED, CLOSED)
        assert record.action == "run"
        (service.state / "closed").unlink()
        opened, _ = await trainer.run(catalog_run(service), "req-open")
        assert (await trainer.result(opened)).outcome == "completed"


class BrokenAdmission(Admission):
    async def admit(self, opened: OpenedExecute) -> RunPlan:
        raise RuntimeError("the catalog moved")


async def test_planning_that_breaks_is_refused_unavailable_not_left_unanswered(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        service.pipeline.admission = BrokenAdmission(
            runner=service.runner,
            catalog=service.catalog,
            state=service.state,
            temp_root=service.temp_root,
        )
        event, _ = await trainer.run(catalog_run(service), "req-broken")
        await refused(service, trainer, event, Code.UNAVAILABLE, UNPLANNED)
        assert f"planning {event.id[:12]} failed: RuntimeError: the catalog moved" in service.logs.lines
