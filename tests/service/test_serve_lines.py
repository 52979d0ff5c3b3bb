"""`serve`'s startup lines as a function of the configuration: an agent that is not `coder` is told, in one
line after the agent's digest, that the catalog's programs do not run (skills only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.service.config import Config
from eval_runner.service.serve import startup_lines
from tests.support.paths import EXAMPLE, REPO
from tests.support.sandboxed_runs import host_confinement

SKILL_ONLY = REPO / "examples" / "brief"
BASE = {"CODER_DOOR_KEY": "door-key-1", "HOME": "/home/trainer", "TMPDIR": "/var/tmp"}
LEFT_OUT = "agent   {kind}: extensions' programs are not run (skills only)"


@pytest.fixture(scope="module")
def confinement() -> Confinement:
    return host_confinement()


def lines(confinement: Confinement, catalog: Path, **env: str) -> list[str]:
    config = Config.from_env({**BASE, "EVAL_RUNNER_CATALOG": str(catalog), **env})
    found = startup_lines(
        config,
        runner="ab" * 32,
        relay_url="ws://127.0.0.1:1",
        catalog=Catalog.load(config.catalog),
        agent_digest="sha256:00",
        confinement=confinement,
    )
    return found[found.index("agent   sha256:00") + 1 :][:1]


@pytest.mark.parametrize("kind", ["claude-code", "codex", "builtin"])
def test_an_agent_other_than_coder_is_told_the_programs_are_not_run(confinement: Confinement, kind: str) -> None:
    assert lines(confinement, EXAMPLE, EVAL_RUNNER_AGENT=f"{kind}:/opt/agent") == [LEFT_OUT.format(kind=kind)]


def test_coder_or_a_catalog_without_programs_says_nothing_of_them(confinement: Confinement) -> None:
    for said in (
        lines(confinement, EXAMPLE, EVAL_RUNNER_CODER="/opt/coder"),
        lines(confinement, EXAMPLE, EVAL_RUNNER_AGENT="coder:/opt/coder"),
        lines(confinement, SKILL_ONLY, EVAL_RUNNER_AGENT="claude-code:/opt/agent"),
    ):
        assert said[0].startswith("sandbox "), said
