"""A hosted run that stalls, for tests of a runner stopped, killed or cancelled mid-run.

Two cases, one run per arm, over `examples/codebase-brief`: the greeting (which asks the door and ends at
once) and a case whose stand-in agent sleeps until it is stopped or its deadline comes. `stalled` sends one
and returns once the phone has seen the greeting's two runs finished, so the stall has begun.
"""

from __future__ import annotations

from eval_runner.contracts.execution import ExecuteBody
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event
from tests.support.paths import EXAMPLE
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input

STALLS = """+++
v = "openagents.eval-case.v1"
kind = "should-not-fire"

[run]
allowed_operations = ["read"]
deadline_seconds = {deadline}

[run.env]
OA_EVAL_FAKE = "wait"
+++

Say hello, then wait.
"""
STALLS_GRADER = '+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nhello\n'


def definition() -> dict[str, JsonValue]:
    return Catalog.load([EXAMPLE]).tools[0].definition.to_json()


def stalling_run(deadline: int = 300) -> dict[str, JsonValue]:
    """The greeting (runs at once), then a case whose agent sleeps until stopped or its deadline."""
    found = definition()
    stalls: dict[str, JsonValue] = {
        "id": "stalls",
        "kind": "should-not-fire",
        "prompt": STALLS.replace("{deadline}", str(deadline)),
        "graders": [{"name": "hello", "text": STALLS_GRADER}],
    }
    return run_input(found, draft(catalog_tool(found), [example_case("greeting"), stalls]), runs=1)


async def stalled(trainer: Trainer, deadline: int = 300) -> tuple[Event, ExecuteBody]:
    """A stalling run sent, once the phone has seen the greeting's two runs finished (the stall has begun)."""
    event, body = await trainer.run(stalling_run(deadline), f"req-stalled-{deadline}")
    await trainer.progress(event, lambda notes: any(n.status == "running" and n.completed >= 2 for n in notes))
    return event, body
