"""`eval-runner check` names every problem it finds, each in its own words, not only the first; `serve`
names every configuration problem too. In process: the host's sandbox verdict is stood in for where a test
needs one, since it is outside our control."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

import eval_runner.service.check as check_module
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.service.check import check_lines, check_main, database_text
from eval_runner.service.config import Config
from eval_runner.service.serve import serve_main
from eval_runner.service.settings import UNREADABLE_DATABASE
from tests.support.paths import EXAMPLE
from tests.support.plain_words import assert_plain
from tests.support.sandboxed_runs import host_confinement

BRAKE = "is an emergency brake: leave it unset for no limit, or set a positive number, not"


Main = Callable[..., int]


def run(main: Main, environ: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(stdout=out, stderr=err, environ=environ)
    return code, out.getvalue(), err.getvalue()


def wrong_environment(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path),
        "EVAL_RUNNER_STATE": str(tmp_path / "state"),
        "EVAL_RUNNER_CODER": "/opt/coder",
        "EVAL_RUNNER_RELAY": "http://relay.example",
        "EVAL_RUNNER_RUNS_PER_DAY": "0",
        "EVAL_RUNNER_JOBS": "two",
        "EVAL_RUNNER_CONCURRENCY": "9",
        "EVAL_RUNNER_PROBE_MS": "30s",
    }


@pytest.mark.parametrize("command", [check_main, serve_main])
def test_every_configuration_problem_is_listed_with_exit_1(tmp_path: Path, command: Main) -> None:
    code, out, err = run(command, wrong_environment(tmp_path))
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "eval-runner: EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not 'http://relay.example'",
        "eval-runner: EVAL_RUNNER_CATALOG names no extension directory",
        "eval-runner: no door key: set CODER_DOOR_KEY or CODER_AI_GATEWAY_KEY",
        f"eval-runner: EVAL_RUNNER_RUNS_PER_DAY {BRAKE} '0'",
        "eval-runner: EVAL_RUNNER_JOBS must be a number, not 'two'",
        "eval-runner: EVAL_RUNNER_CONCURRENCY must be from 1 to 8",
        "eval-runner: EVAL_RUNNER_PROBE_MS is a positive number of milliseconds, not '30s'",
    ]
    assert_plain(err)
    assert not (tmp_path / "state").exists()


def test_past_the_configuration_every_problem_is_listed_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that cannot confine, a key file others can read, a catalog directory that is no extension and a
    missing agent: one `check` names all four, in the order `serve` would meet them."""

    async def stand_in_unconfined(root: Path, **_: object) -> Unconfined:
        return Unconfined("bubblewrap is inoperable: no user namespaces")

    monkeypatch.setattr(check_module, "probe", stand_in_unconfined)
    key = tmp_path / "runner-key"
    key.write_text("11" * 32 + "\n")
    key.chmod(0o644)
    not_an_extension = tmp_path / "nothing-here"
    agent = tmp_path / "no-agent"
    environ = {
        "HOME": str(tmp_path),
        "EVAL_RUNNER_STATE": str(tmp_path / "state"),
        "EVAL_RUNNER_KEY_FILE": str(key),
        "EVAL_RUNNER_CATALOG": str(not_an_extension),
        "EVAL_RUNNER_CODER": str(agent),
        "CODER_DOOR_KEY": "door-key",
        "EVAL_RUNNER_TMP": str(tmp_path),
    }
    code, out, err = run(check_main, environ)
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert len(lines) == 4, err
    assert lines[0] == "eval-runner: unconfined_host: bubblewrap is inoperable: no user namespaces"
    assert lines[1] == f"eval-runner: the runner key {key} is readable by others; chmod 600 it"
    assert lines[2].startswith("eval-runner: ")
    assert str(not_an_extension) in lines[2]
    assert lines[3] == f"eval-runner: EVAL_RUNNER_CODER {agent}: No such file or directory"
    assert_plain(err)
    assert not (tmp_path / "state").exists()


def test_in_a_fleet_the_usage_line_names_the_ledger_database_never_its_password(tmp_path: Path) -> None:
    environ = {
        "HOME": str(tmp_path),
        "EVAL_RUNNER_STATE": str(tmp_path / "state"),
        "CODER_DOOR_KEY": "door-key",
        "EVAL_RUNNER_CATALOG": str(EXAMPLE),
        "EVAL_RUNNER_CODER": str(tmp_path / "coder"),
    }
    catalog = Catalog.load([EXAMPLE])
    confinement = host_confinement()
    alone = check_lines(Config.from_env(environ), catalog, "sha256:0", confinement)
    assert f"usage    {tmp_path / 'state' / 'usage'}" in alone
    url = "postgresql://eval:s3cret-pw@db.example:5433/ledger?sslmode=require&password=s3cret-pw"
    fleet = check_lines(Config.from_env(environ | {"EVAL_RUNNER_DATABASE": url}), catalog, "sha256:0", confinement)
    assert [line for line in fleet if line.startswith("usage")] == [
        "usage    the ledger database postgresql://eval@db.example:5433/ledger (every runner of the fleet)"
    ]
    assert "s3cret" not in "\n".join(fleet)
    assert [line for line in fleet if not line.startswith("usage")] == [
        line for line in alone if not line.startswith("usage")
    ]


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql:///ledger", "postgresql:///ledger"),
        ("postgres://u:pw@[::1]:5432/l?password=pw", "postgresql://u@[::1]:5432/l"),
        ("postgresql://u:pw@a,b:7/l", "postgresql://u@a,b:7/l"),
        ("postgresql://u:p%40w@/l?host=/run/pg&port=5433", "postgresql://u@/l?host=/run/pg&port=5433"),
        ("postgresql://u:pa/ss@host/db", UNREADABLE_DATABASE),  # libpq reads `ss@host/db` as the database
        ("postgresql://u:pw@h/db?sslmode=wrong=", UNREADABLE_DATABASE),
    ],
)
def test_a_database_is_named_as_the_connection_reads_it(url: str, named: str) -> None:
    assert database_text(url) == named


@given(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20),
)
def test_no_password_reaches_the_databases_name(password: str, tail: str) -> None:
    secret = f"pw-{password}"
    for url in (
        f"postgresql://eval:{quote(secret, safe='')}@db.example:5432/ledger",
        f"postgresql://eval@db.example/ledger?password={quote(secret, safe='')}",
        f"postgresql://eval:{secret}@db.example/ledger{tail}",  # not escaped, as an operator may write it
    ):
        named = database_text(url)
        assert secret not in named
        assert quote(secret, safe="") not in named
