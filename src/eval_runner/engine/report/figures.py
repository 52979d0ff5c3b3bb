"""Per run and per arm: tokens in and out, model calls (turns) and tool calls — the figures skill authors
compare beside cost and time (issue 11).

Two witnesses can say what a run used: the door, through the per-run door proxy that read every answer
(`engine.run.door_usage`, `RunRecord.door_usage`), and the agent, in its trajectory (`final_metrics`, its
steps and calls). Where both speak the door wins for tokens and model calls: it counts every call the same
way in both arms whatever the agent (an agent's own totals leave out side calls, or count turns its own way),
and it is what the door bills. Tool calls only the trajectory knows. A figure nobody reported is None,
never 0: a door whose answers carried no usage, a coder log whose steps carry no token counts, a run
without a trajectory. Decisions: docs/decisions.md ("Figures per arm"). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from eval_runner.contracts.report_figures import ARMS, METRICS, FigureRow, Figures
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.report.inputs import Attempt, RunFigures
from eval_runner.engine.run.door_usage import DoorUsage
from eval_runner.engine.run.trajectory import Source, Trajectory


def run_figures(trajectory: Trajectory | None, door: DoorUsage | None) -> RunFigures:
    """One run's figures from what the door reported and what the agent wrote down."""
    input_tokens, output_tokens, turns = _agent_said(trajectory)
    if door is not None and (door.reported > 0 or door.answers == 0):
        # Every model call passes the proxy: no successful answer at all is a known zero.
        input_tokens, output_tokens, turns = door.input_tokens, door.output_tokens, door.reported
    tool_calls = None if trajectory is None else sum(1 for call in trajectory.calls if not call.is_decision)
    return RunFigures(*(_bounded(value) for value in (input_tokens, output_tokens, turns, tool_calls)))


#: Past this a run's figure is not believed (an agent or a door can write any number): unknown, so an arm's
#: total over its runs (at most 80) stays far inside JSON's exact integers and the report always builds.
MAX_RUN_FIGURE = 10**12


def _bounded(value: int | None) -> int | None:
    return value if value is not None and 0 <= value <= MAX_RUN_FIGURE else None


def _agent_said(trajectory: Trajectory | None) -> tuple[int | None, int | None, int | None]:
    """Tokens and model calls by the agent's own account. Its totals count only when a step carries token
    counts or the totals are not both zero (a log with no counts sums to zero, which is not a zero)."""
    if trajectory is None:
        return None, None, None
    raw_steps = trajectory.document.get("steps")
    metered = sum(
        1
        for raw in (raw_steps if isinstance(raw_steps, list) else ())
        if isinstance(raw, dict) and raw.get("source") == "agent" and isinstance(raw.get("metrics"), dict)
    )
    agent_steps = sum(1 for step in trajectory.steps if step.source is Source.AGENT)
    turns = metered or agent_steps or None
    final = trajectory.document.get("final_metrics")
    if not isinstance(final, dict):
        return None, None, turns
    prompt, completion = _count(final.get("total_prompt_tokens")), _count(final.get("total_completion_tokens"))
    if prompt is None or completion is None or (metered == 0 and prompt + completion == 0):
        return None, None, turns
    return prompt, completion, turns


def _count(value: JsonValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def arm_figures(attempts: Sequence[Attempt]) -> Figures:
    """Each arm's totals over its runs (every planned attempt, so a run never made counts as unknown);
    an arm with no attempt has no rows."""
    rows: list[FigureRow] = []
    for arm in ARMS:
        runs = [attempt.figures for attempt in attempts if attempt.arm.value == arm]
        if not runs:
            continue
        for metric in METRICS:
            known = [value for value in (_bounded(getattr(run, metric)) for run in runs) if value is not None]
            total = sum(known) if known else None
            rows.append(FigureRow(arm, metric, total, len(known), len(runs) - len(known)))
    return Figures(tuple(rows))
