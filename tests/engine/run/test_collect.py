"""What a run leaves behind: created files by path and digest, links by target and never followed, the
outputs read from the runner's own descriptors, the cost, and secrets kept out of results."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.engine.run import collect
from eval_runner.engine.run.collect import (
    MAX_COPIED,
    CreatedFile,
    created_files,
    last_cost,
    remove_results_holding_secret,
    scrub,
    secret_in,
    signature,
)
from eval_runner.engine.run.sandbox import Confinement
from tests.support.sandboxed_runs import (
    fresh_temp_root,
    host_confinement,
    run_act,
    spec_for,
)


@pytest.fixture(scope="session")
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def test_created_files_are_collected_by_path_and_digest(confinement: Confinement, temp_root: Path) -> None:
    fixtures = (("changed.txt", b"original"), ("same.txt", b"untouched"))
    record = await run_act(spec_for(temp_root, "files", fixtures=fixtures), confinement)
    assert record.stdout == b"made\n"
    big, exactly = b"b" * (MAX_COPIED + 1), b"e" * MAX_COPIED
    assert record.created == (
        CreatedFile("big.bin", "file", _digest(big), len(big)),  # over 1 MiB: digest only
        CreatedFile("changed.txt", "file", _digest(b"changed"), 7, data=b"changed"),
        CreatedFile("dir-link", "symlink", _digest(b"sub"), 3, target="sub", inside=True),
        CreatedFile("exactly.bin", "file", _digest(exactly), len(exactly), data=exactly),
        CreatedFile("fifo", "other", None, 0),
        CreatedFile("shadow-link", "symlink", _digest(b"/etc/shadow"), 11, target="/etc/shadow"),
        CreatedFile("sub/deeper/new.txt", "file", _digest(b"new"), 3, data=b"new"),
    )
    assert record.created_complete
    assert record.workspace is not None
    record.workspace.close()


async def test_an_agent_that_swaps_its_outputs_for_links_gets_nothing_of_the_host(
    confinement: Confinement, temp_root: Path
) -> None:
    record = await run_act(spec_for(temp_root, "swap-outputs"), confinement)
    assert record.stdout == b"before the swap\n"  # read from the runner's own descriptor, not the path
    assert record.trajectory is None  # a link, so not read
    assert record.created == (
        CreatedFile("trajectory-copy", "symlink", _digest(b"/etc/shadow"), 11, target="/etc/shadow"),
    )
    assert record.workspace is not None
    record.workspace.close()


def test_a_fixture_left_alone_is_not_created_and_a_link_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / "same.txt").write_bytes(b"same")
    (tmp_path / "secret-link").symlink_to("/etc/shadow")
    os.mkfifo(tmp_path / "pipe")  # opening it to read would block: it must never be opened
    created, complete = created_files(tmp_path, {"same.txt": signature(b"same")}, [])
    assert [(entry.path, entry.kind, entry.target) for entry in created] == [
        ("pipe", "other", None),
        ("secret-link", "symlink", "/etc/shadow"),
    ]
    assert complete


def test_created_files_scrub_kept_bytes_paths_and_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_bytes(b"token=s3cret-token;")
    (tmp_path / "s3cret-token.txt").write_bytes(b"x")
    (tmp_path / "link").symlink_to("/tmp/s3cret-token")
    created, _ = created_files(tmp_path, {}, [b"s3cret-token"])
    assert [(entry.path, entry.data, entry.target) for entry in created] == [
        ("link", None, "/tmp/[redacted]"),
        ("out.txt", b"token=[redacted];", None),
        ("[redacted].txt", b"x", None),
    ]
    assert created[1].digest == _digest(b"token=[redacted];")
    assert (tmp_path / "out.txt").read_bytes() == b"token=[redacted];"


@pytest.mark.parametrize(
    ("stdout", "cost"),
    [
        (b'{"outcome":"completed","cost_usd":0.5}\n', 0.5),
        (b'{"outcome":"a","cost_usd":1}\n{"outcome":"b","cost_usd":2}\n{"no":"outcome","cost_usd":3}\n', 2.0),
        (b'{"outcome":"a","cost_usd":1}\n{"outcome":"b"}\n', None),  # the last outcome line has no cost
        (b'{"outcome":"a","cost_usd":"1"}\n', None),
        (b'{"outcome":"a","cost_usd":true}\n', None),
        (b"not json\n[1, 2]\n", None),
        (b'{"outcome":"a","cost_usd":0.25}\nnot json at the end', 0.25),
    ],
)
def test_the_cost_is_the_last_outcome_lines(stdout: bytes, cost: float | None) -> None:
    assert last_cost(stdout) == cost


def test_scrub_replaces_the_longer_secret_first() -> None:
    # run.py hands secrets longest first; a token that contains another is replaced whole.
    assert scrub(b"a-KEY-LONG-b KEY", [b"KEY-LONG", b"KEY"]) == b"a-[redacted]-b [redacted]"


def test_a_results_directory_holding_a_secret_is_removed_with_the_failure_message(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "runs" / "case-a" / "subject-1").mkdir(parents=True)
    (results / "report.json").write_text("{}")
    (results / "runs" / "case-a" / "subject-1" / "stdout.jsonl").write_bytes(b"x" * 100 + b"door-key-123" + b"y")
    message = remove_results_holding_secret(results, [b"door-key-123", b"decision-key"])
    assert message == "the door key was found in runs/case-a/subject-1/stdout.jsonl; the results were removed"
    assert not results.exists()


def test_a_secret_is_found_across_read_chunks_in_names_and_in_link_targets(tmp_path: Path) -> None:
    secret = b"0123456789abcdef"
    straddling = tmp_path / "big"
    straddling.mkdir()
    (straddling / "file").write_bytes(b"a" * ((1 << 20) - 5) + secret + b"b" * 10)
    assert secret_in(straddling, [secret]) == "file"
    named = tmp_path / "named"
    (named / "files").mkdir(parents=True)
    (named / "files" / "0123456789abcdef.txt").write_bytes(b"")
    assert secret_in(named, [secret]) == "files/0123456789abcdef.txt"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "link").symlink_to("/0123456789abcdef")
    assert secret_in(linked, [secret]) == "link"


def test_a_clean_results_directory_is_kept(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"verdict": "pass"}')
    assert remove_results_holding_secret(tmp_path, [b"door-key-123", b""]) is None
    assert (tmp_path / "report.json").exists()


def test_collection_stops_at_its_bounds_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in "abcde":
        (tmp_path / name).write_bytes(b"x" * 10)
    monkeypatch.setattr(collect, "MAX_CREATED", 3)
    created, complete = created_files(tmp_path, {}, [])
    assert ([entry.path for entry in created], complete) == (["a", "b", "c"], False)
    monkeypatch.setattr(collect, "MAX_CREATED", 100)
    monkeypatch.setattr(collect, "MAX_READ", 25)  # bytes read for created files, all together
    created, complete = created_files(tmp_path, {}, [])
    assert ([entry.path for entry in created], complete) == (["a", "b"], False)
    monkeypatch.setattr(collect, "MAX_READ", 50)
    assert created_files(tmp_path, {}, [])[1]
