"""A sealed report for the envelope and report property tests: the sample report inline, issued at AT."""

from __future__ import annotations

from eval_runner.contracts.envelope import Envelope
from eval_runner.contracts.report import REPORT_SCHEMA
from tests.support.sample_reports import AT, report


def sealed_report() -> Envelope:
    return Envelope.of_inline(report().to_json(), REPORT_SCHEMA, issued_at=AT, retain_until=AT + 604_800)
