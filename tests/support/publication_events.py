"""Publication events for the report-side contract tests: fixed labels' keys (SHA-256 of the label, throwaway),
the runner's public key, events signed with them, and a sample report's bytes as the runner would publish them."""

from __future__ import annotations

import hashlib

from eval_runner.contracts.publication import Unsigned
from eval_runner.contracts.report import report_ref
from eval_runner.nostr.event import Event, sign
from eval_runner.nostr.keys import SecretKey
from tests.support.sample_reports import AT, Spec, report


def key(label: str) -> SecretKey:
    return SecretKey(hashlib.sha256(label.encode()).digest())


def pubkey(label: str) -> str:
    return key(label).public_key().to_hex()


RUNNER = pubkey("runner")


def signed(parts: Unsigned, label: str = "runner", at: int = AT) -> Event:
    return sign(key(label), parts.kind, parts.tags, parts.content, at)


def report_bytes(spec: Spec | None = None) -> bytes:
    return report_ref(report(spec or Spec(evaluator=RUNNER)))[0]
