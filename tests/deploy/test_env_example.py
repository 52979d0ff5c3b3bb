"""`deploy/eval-runner.env.example` names every variable the service reads, with the brakes unset and the
door keys blank, in a form both systemd's EnvironmentFile= and the runner's configuration read.
"""

from __future__ import annotations

import re

from eval_runner.cli.service import SERVICE_ENVIRONMENT
from eval_runner.service.config import Config, ConfigError
from tests.support.paths import REPO

EXAMPLE = REPO / "deploy" / "eval-runner.env.example"
#: What systemd or the login gives the service, never the file.
FROM_THE_SYSTEM = {"HOME", "NOTIFY_SOCKET"}
KEYS = ("CODER_DOOR_KEY", "CODER_AI_GATEWAY_KEY", "TYPESAFE_API_KEY", "AI_GATEWAY_API_KEY", "OPENROUTER_API_KEY")
BRAKES = ("EVAL_RUNNER_RUNS_PER_DAY", "EVAL_RUNNER_TURNS_PER_DAY")
LINE = re.compile(r"(#\s*)?([A-Z][A-Z0-9_]*)=(.*)")


def entries() -> tuple[dict[str, str], set[str]]:
    """The lines that set a variable (name → value) and the names only shown in a comment (`# NAME=…`)."""
    active: dict[str, str] = {}
    shown: set[str] = set()
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        found = LINE.fullmatch(line)
        if found is None:
            assert not line or line.startswith("#"), f"not NAME=VALUE or a comment: {line!r}"
            continue
        commented, name, value = found.groups()
        if commented:
            shown.add(name)
        else:
            assert name not in active, f"{name} is set twice"
            assert not re.search(r"[\"'$~ ]", value), f"{name}: systemd reads no quotes, variables, ~ or spaces"
            active[name] = value
    return active, shown


def test_every_variable_the_service_reads_is_in_the_example() -> None:
    active, shown = entries()
    named = {variable.name for variable in SERVICE_ENVIRONMENT}
    missing = named - FROM_THE_SYSTEM - set(active) - shown
    assert not missing, f"add to {EXAMPLE.name}: {sorted(missing)}"
    stale = (set(active) | shown) - named
    assert not stale, f"the service reads no {sorted(stale)}"
    assert not (set(active) & FROM_THE_SYSTEM)
    text = EXAMPLE.read_text(encoding="utf-8")
    assert all(name in text for name in FROM_THE_SYSTEM), "say where those come from"


def test_the_brakes_are_unset_and_the_keys_blank() -> None:
    active, shown = entries()
    for brake in BRAKES:
        assert brake not in active
        assert brake in shown
    for key in KEYS:
        assert active.get(key, "") == ""
    assert "CODER_DOOR_KEY" in active, "the one key every runner needs is there to fill in"
    assert "EVAL_RUNNER_CATALOG" not in active, "the catalog comes from install.sh's catalog file"


def test_filled_in_it_is_a_configuration_the_runner_takes() -> None:
    active, _ = entries()
    filled = {name: value.replace("/home/USER/", "/home/someone/") for name, value in active.items()}
    filled |= {"CODER_DOOR_KEY": "door-key", "EVAL_RUNNER_CATALOG": "/srv/catalog/tool", "HOME": "/home/someone"}
    try:
        config = Config.from_env(filled)
    except ConfigError as error:
        raise AssertionError(f"the example, filled in, is refused: {error.problems}") from None
    assert config.limits.line() == "no usage limit; 2 suites and 4 runs at once"
    assert config.metrics_listen is None
