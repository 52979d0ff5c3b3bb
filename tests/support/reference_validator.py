"""The reference's report validator, as a reader running the reference's checks applies it.

Written from reading `crates/ext-eval/src/report.rs` `validate` in OpenAgentsInc/openagents (Apache-2.0):
a closed set of top-level keys, closed measurement rows whose metric the suite's `metrics.json` defines,
coverage that sums, a verdict a report without a baseline may make, and, with the artifacts, every
document referenced by exact bytes and a runs document that lists exactly the attempts the coverage
counts. Our own contract parser (`contracts.report`) is the wire reader; this is the stricter engine
check a phone or referee may run, kept here so a report of ours that it would refuse fails a test.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

REPORT_KEYS = (
    "v",
    "requires",
    "suite",
    "partition",
    "subject",
    "baseline",
    "evaluator",
    "started_at",
    "ended_at",
    "runs",
    "coverage",
    "measurements",
    "verdict",
    "limitations",
    "meta",
    "optimization",
)
MEASUREMENT_KEYS = {"arm", "metric", "value", "denominator", "unknown_count", "uncertainty", "evidence"}
COUNT_KEYS = {"planned", "attempted", "completed", "refused", "failed", "cancelled", "unknown", "excluded"}


def _is_ref(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("digest"), str)
        and value["digest"].startswith("sha256:")
        and isinstance(value.get("size"), int)
        and isinstance(value.get("media_type"), str)
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _find(artifacts: Mapping[str, bytes], reference: Any) -> Any:
    """The parsed document whose exact bytes `reference` names, when the artifacts hold them."""
    if not _is_ref(reference):
        return None
    for data in artifacts.values():
        if len(data) == reference["size"] and "sha256:" + hashlib.sha256(data).hexdigest() == reference["digest"]:
            return json.loads(data)
    return None


def suite_metrics(report: Mapping[str, Any], artifacts: Mapping[str, bytes]) -> set[str] | None:
    suite = _find(artifacts, report.get("suite"))
    metrics = None if suite is None else _find(artifacts, suite.get("metrics"))
    if not isinstance(metrics, dict) or not isinstance(metrics.get("metrics"), list):
        return None
    return {entry["id"] for entry in metrics["metrics"] if isinstance(entry, dict) and isinstance(entry.get("id"), str)}


def validate(report: Mapping[str, Any], artifacts: Mapping[str, bytes] | None = None) -> list[str]:
    """Every problem the reference's validator would name (empty when it accepts the report)."""
    problems: list[str] = []
    for key in report:
        if key not in REPORT_KEYS:
            problems.append(f"unknown report key `{key}`")
    for key in REPORT_KEYS[:-1]:
        if key not in report:
            problems.append(f"the report has no `{key}`")
    baseline_present = report.get("baseline") is not None
    attempted: dict[str, int] = {}
    coverage = report.get("coverage")
    if isinstance(coverage, dict):
        for arm in ("subject", "baseline"):
            counts = coverage.get(arm)
            if counts is None and arm == "baseline" and not baseline_present:
                continue
            if not isinstance(counts, dict) or set(counts) != COUNT_KEYS:
                problems.append(f"`coverage.{arm}` must have exactly the count keys")
                continue
            found = {key: _count(value) for key, value in counts.items()}
            if any(value is None for value in found.values()):
                problems.append(f"`coverage.{arm}` counts must be nonnegative integers")
                continue
            terminal = sum(found[key] or 0 for key in ("completed", "refused", "failed", "cancelled", "unknown"))
            if terminal != found["attempted"]:
                problems.append(f"`coverage.{arm}`: terminal counts sum to {terminal}, not the attempted")
            attempted[arm] = found["attempted"] or 0
    else:
        problems.append("`coverage` is not an object")
    metric_ids = None if artifacts is None else suite_metrics(report, artifacts)
    for index, entry in enumerate(report.get("measurements") or []):
        at = f"measurements[{index}]"
        if not isinstance(entry, dict) or set(entry) != MEASUREMENT_KEYS:
            problems.append(f"{at} must have exactly {', '.join(sorted(MEASUREMENT_KEYS))}")
            continue
        arm = entry["arm"]
        if arm == "baseline" and not baseline_present:
            problems.append(f"{at} measures a baseline the report doesn't have")
        elif arm not in ("subject", "baseline", "comparison"):
            problems.append(f"{at}.arm must be subject, baseline, or comparison")
        metric = entry["metric"]
        if not isinstance(metric, str):
            problems.append(f"{at}.metric must be a string")
        elif metric_ids is not None and metric not in metric_ids:
            problems.append(f"{at}.metric `{metric}` is not a suite metric")
        value = entry["value"]
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ):
            problems.append(f"{at}.value must be a finite number or null")
        for key in ("denominator", "unknown_count"):
            if _count(entry[key]) is None:
                problems.append(f"{at}.{key} must be a nonnegative integer")
        if entry["uncertainty"] is not None and not _is_ref(entry["uncertainty"]):
            problems.append(f"{at}.uncertainty must be an ArtifactRef or null")
        if not isinstance(entry["evidence"], list) or not all(_is_ref(item) for item in entry["evidence"]):
            problems.append(f"{at}.evidence must be an array of ArtifactRefs")
    verdict = report.get("verdict")
    if verdict in ("pass", "fail") and not baseline_present:
        problems.append("a report without a baseline can't claim a change; its verdict is inconclusive")
    elif verdict not in ("pass", "fail", "inconclusive"):
        problems.append("`verdict` must be pass, fail, or inconclusive")
    meta = report.get("meta")
    if not isinstance(meta, dict) or not isinstance(meta.get("ext_eval"), dict):
        problems.append("`meta.ext_eval` is missing")
    if artifacts is not None:
        for key in ("suite", "partition", "runs", "limitations"):
            if _find(artifacts, report.get(key)) is None:
                problems.append(f"no artifact holds the exact bytes `{key}` references")
        runs = _find(artifacts, report.get("runs"))
        entries = runs.get("runs", []) if isinstance(runs, dict) else []
        for arm in ("subject", "baseline"):
            listed = sum(1 for entry in entries if entry.get("arm") == arm)
            if listed != attempted.get(arm, 0):
                problems.append(
                    f"the runs document lists {listed} {arm} attempts, and coverage counts {attempted.get(arm, 0)}"
                )
        keys = [(entry.get("arm"), entry.get("case"), entry.get("attempt")) for entry in entries]
        if len(set(keys)) != len(keys):
            problems.append("the runs document counts an attempt twice")
    return problems
