"""A claim's row is derived from the `Claim` record's fields: the column list is the `claims` table's own, in
its order (so ledgers written before stay readable byte for byte), and every field goes to its row and
comes back unchanged, whatever its value.

(It belongs beside the ledger's tests in `tests/service/ledger/`; it sits here while those move.)
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.claims import CLAIM_COLUMNS, Claim, LedgerError, ProgressNote, claim_from_row, claim_row
from eval_runner.service.ledger.file import SCHEMA, migrate
from eval_runner.service.ledger.store import Ledger, ledger_path
from tests.support.paths import EXAMPLE
from tests.support.trainer_side import Trainer, catalog_tool, draft, run_input

HEX = "0123456789abcdef"
RUNNER = SecretKey.parse("11" * 32).public_key().to_hex()


@pytest.fixture
def db() -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    connection.row_factory = sqlite3.Row
    migrate(connection)
    yield connection
    connection.close()


def test_the_columns_are_the_tables_own_in_its_order(db: sqlite3.Connection) -> None:
    table = tuple(row["name"] for row in db.execute("PRAGMA table_info(claims)"))
    assert table == CLAIM_COLUMNS
    assert len(CLAIM_COLUMNS) == 36
    assert [spec.name for spec in dataclasses.fields(Claim)] == [*CLAIM_COLUMNS, "aliases", "progress"]
    assert "CREATE TABLE claims (\n    key TEXT PRIMARY KEY,\n    worker TEXT NOT NULL," in SCHEMA


hex64 = st.text(HEX, min_size=64, max_size=64)
text = st.text(st.characters(codec="utf-8"), max_size=20)
maybe_text = st.none() | text
count = st.integers(0, 2**53)
record = st.builds(
    ArtifactRef,
    digest=hex64.map(lambda digest: f"sha256:{digest}"),
    size=st.integers(0, 2**40),
    media_type=st.sampled_from(["application/json", "application/octet-stream"]),
    schema=st.none() | st.just("openagents.execution.v1"),
    event=st.none() | st.builds(EventRef, id=hex64, pubkey=hex64, kind=st.sampled_from([3184, 3188])),
)
claims = st.builds(
    Claim,
    key=text,
    worker=hex64,
    principal=hex64,
    request=text,
    attempt=st.integers(1, 2**31),
    run=text,
    fingerprint=hex64,
    execute_event=hex64,
    created_at=count,
    deadline=count,
    retain_until=count,
    input_digest=hex64,
    lock_digest=hex64,
    mailbox=hex64,
    controller=hex64,
    record=record,
    root=st.binary(max_size=64),
    root_digest=hex64,
    phase=st.sampled_from(["reserved", "accepted", "intended", "running", "terminal", "unknown", "tombstone"]),
    acknowledged=st.booleans(),
    dispatch_intent=st.booleans(),
    effect_started=st.booleans(),
    observed=st.booleans(),
    outcome=st.none() | st.sampled_from(["completed", "failed", "cancelled", "unknown"]),
    dispatched=st.none() | st.booleans(),
    result=maybe_text,
    result_digest=maybe_text,
    conflicts=st.lists(hex64, max_size=3).map(tuple),
    code=maybe_text,
    message=maybe_text,
    cancel_requested=st.booleans(),
    cancel_confirmed=st.booleans(),
    cancel_reason=maybe_text,
    tombstone=st.booleans(),
    holds_slot=st.booleans(),
    settled_at=st.none() | count,
    aliases=st.lists(hex64, max_size=3).map(tuple),
    progress=st.lists(st.builds(ProgressNote, seq=st.integers(0, 9), status=st.just("running")), max_size=3).map(tuple),
)


def stored(claim: Claim) -> sqlite3.Row:
    """`claim`'s row, written to and read back from a `claims` table."""
    return stored_row(claim_row(claim))


def stored_row(row: dict[str, Any]) -> sqlite3.Row:
    with sqlite3.connect(":memory:", isolation_level=None) as db:
        db.row_factory = sqlite3.Row
        db.executescript("CREATE TABLE claims (" + ", ".join(CLAIM_COLUMNS) + ")")
        db.execute(
            f"INSERT INTO claims ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
            tuple(row.values()),
        )
        found: sqlite3.Row = db.execute("SELECT * FROM claims").fetchone()
        return found


@given(claims)
def test_every_field_round_trips_through_its_row(claim: Claim) -> None:
    back = claim_from_row(stored(claim), claim.aliases, claim.progress)
    assert back == claim
    for spec in dataclasses.fields(Claim):
        assert getattr(back, spec.name) == getattr(claim, spec.name), spec.name


def test_the_row_is_exactly_what_the_ledger_writes(tmp_path: Path) -> None:
    """Through a real ledger: a claim reserved, acknowledged, intended, progressed and settled, its row read
    back with plain SQLite, is the row `claim_row` makes of the record the ledger returns."""
    trainer = Trainer("ws://unused", RUNNER)
    definition = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    body = trainer.body(run_input(definition, draft(catalog_tool(definition))), "req-row")
    now = int(time.time())
    path = ledger_path(tmp_path)
    with Ledger.open(path, RUNNER, now) as ledger:
        claim = ledger.prepare(body, "e" * 64, trainer.pubkey, now, "ab" * 32, created_at=now)
        assert isinstance(claim, Claim)
        rows = [raw_row(path, claim.key)]
        ledger.acknowledge(claim.key)
        ledger.intend(claim.key)
        ledger.record_progress(claim.key, 0, "queued")
        rows.append(raw_row(path, claim.key))
        settled = ledger.lookup(claim.key)
        assert settled is not None
        assert claim_row(settled) == rows[-1]
        assert claim_row(claim) == rows[0]
        assert (rows[0]["dispatched"], rows[-1]["dispatched"]) == (0, None)
        assert rows[0]["conflicts"] == "[]"
        assert str(rows[0]["record"]).startswith('{"digest":"sha256:')


def raw_row(path: Path, key: str) -> dict[str, object]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM claims WHERE key = ?", (key,)).fetchone()
        return dict(zip(row.keys(), tuple(row), strict=True))


def test_a_row_the_contracts_refuse_is_a_ledger_error() -> None:
    row = claim_row(CLAIM)
    row["record"] = '{"digest": 1}'
    with pytest.raises(LedgerError, match="is unreadable"):
        claim_from_row(stored_row(row), (), ())


CLAIM = Claim(
    key="k",
    worker=RUNNER,
    principal="22" * 32,
    request="req",
    attempt=1,
    run="",
    fingerprint="33" * 32,
    execute_event="44" * 32,
    created_at=1,
    deadline=2,
    retain_until=3,
    input_digest="55" * 32,
    lock_digest="66" * 32,
    mailbox="77" * 32,
    controller=RUNNER,
    record=ArtifactRef(digest="sha256:" + "88" * 32, size=4, media_type="application/json"),
    root=b"{}",
    root_digest="99" * 32,
    phase="reserved",
    acknowledged=False,
    dispatch_intent=False,
    effect_started=False,
    observed=False,
    outcome=None,
    dispatched=False,
    result=None,
    result_digest=None,
    conflicts=(),
    code=None,
    message=None,
    cancel_requested=False,
    cancel_confirmed=False,
    cancel_reason=None,
    tombstone=False,
    holds_slot=True,
    settled_at=None,
    aliases=(),
    progress=(),
)
