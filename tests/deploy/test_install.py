"""`deploy/install.sh` installs a commit into its own directory, runs `eval-runner check` against it, and
restarts the user service only when the check passes; the unit it renders is one systemd accepts.

The source is a clone of this repository at HEAD with the working tree's `deploy/` laid over it (a no-op once
`deploy/` is committed), so what is installed is this repository's code through these deploy files, and the
repository itself is only read. `uv sync --frozen` runs for real (from uv's cache). systemd is outside our
control: `systemctl` is a stand-in on PATH that records its arguments, and `systemd-analyze verify` is the
real one where the host has it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from eval_runner import stand_ins
from tests.support.paths import REPO
from tests.support.sandboxed_runs import fresh_temp_root

INSTALL = REPO / "deploy" / "install.sh"
UNIT = "eval-runner.service"
#: Made per session: the installed tree holds this very file, so a literal key would be found in it.
DOOR_KEY = f"door-key-install-{secrets.token_hex(8)}"
BOUND = 300
GIT = ("git", "-c", "user.name=install test", "-c", "user.email=install@invalid", "-c", "commit.gpgsign=false")
STAND_IN_SYSTEMCTL = """#!/bin/sh
# A stand-in for systemctl (systemd is outside the test's control): records each call, succeeds.
printf '%s\\n' "$*" >> "$STAND_IN_SYSTEMCTL_CALLS"
"""


@dataclass(frozen=True)
class Site:
    """A source repository, a home and a prefix in the test's directory, and the environment install.sh runs in."""

    root: Path
    temp: Path
    source: Path
    commit: str
    prefix: Path
    env_file: Path
    calls: Path
    environ: dict[str, str]

    def install(self, *args: str, env_file: Path | None = None) -> subprocess.CompletedProcess[str]:
        command = ["bash", str(INSTALL), "--source", str(self.source), "--prefix", str(self.prefix)]
        command += ["--env-file", str(env_file or self.env_file), *args]
        return subprocess.run(command, env=self.environ, capture_output=True, text=True, timeout=BOUND, check=False)

    @property
    def release(self) -> Path:
        return self.prefix / "releases" / self.commit

    def systemctl_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


def run(*command: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=BOUND, check=True)
    return done.stdout.strip()


def source_at_head(into: Path) -> tuple[Path, str]:
    """A clone of this repository at HEAD with the working tree's deploy/ committed over it."""
    source = into / "source"
    run("git", "clone", "--quiet", str(REPO), str(source))
    shutil.rmtree(source / "deploy", ignore_errors=True)
    shutil.copytree(REPO / "deploy", source / "deploy")
    run(*GIT, "-C", str(source), "add", "--all", "deploy")
    run(*GIT, "-C", str(source), "commit", "--quiet", "--allow-empty", "-m", "deploy/ as in the working tree")
    return source, run("git", "-C", str(source), "rev-parse", "HEAD")


def env_file(path: Path, state: Path, temp: Path, **extra: str) -> Path:
    values = {
        "EVAL_RUNNER_STATE": str(state),
        "EVAL_RUNNER_TMP": str(temp),
        "EVAL_RUNNER_CODER": str(stand_ins.AGENT),
        "CODER_DOOR_URL": "http://127.0.0.1:9",
        "CODER_DOOR_KEY": DOOR_KEY,
        **extra,
    }
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("install")
    source, commit = source_at_head(root)
    temp_roots = fresh_temp_root()  # one the sandbox user can reach: the check probes the sandbox in it
    temp = next(temp_roots)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(STAND_IN_SYSTEMCTL)
    systemctl.chmod(0o755)
    calls = root / "systemctl-calls"
    cache = run("uv", "cache", "dir") if shutil.which("uv") else ""
    environ = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", str(root)),
        "XDG_CONFIG_HOME": str(root / "config"),  # the unit goes here, never to the real user's
        "LANG": "C.UTF-8",
        "STAND_IN_SYSTEMCTL_CALLS": str(calls),
        **({"UV_CACHE_DIR": cache} if cache else {}),
    }
    env = env_file(root / "env", root / "state", temp)
    yield Site(root, temp, source, commit, root / "prefix", env, calls, environ)
    next(temp_roots, None)


@pytest.fixture(scope="module")
def installed(site: Site) -> subprocess.CompletedProcess[str]:
    done = site.install("--no-restart", "HEAD")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_install_puts_the_commit_in_its_own_directory_and_checks_it(
    site: Site, installed: subprocess.CompletedProcess[str]
) -> None:
    release = site.release
    assert (site.prefix / "current").resolve() == release
    assert (release / "REVISION").read_text() == site.commit + "\n"
    # The check ran against the installed code, the environment file and the catalog, and passed.
    assert "install: eval-runner check" in installed.stdout
    assert "catalog  Codebase brief" in installed.stdout
    assert "admission open" in installed.stdout
    assert (release / "CHECK").read_text().splitlines()[-1] == "admission open"
    # The catalog file names the release's own copy of each catalog directory.
    assert (release / "catalog.env").read_text() == f"EVAL_RUNNER_CATALOG={release}/examples/codebase-brief\n"
    # --no-restart: systemd is never asked, and the user's unit directory is untouched.
    assert "not restarting (--no-restart)" in installed.stdout
    assert site.systemctl_calls() == []
    assert not (site.root / "config" / "systemd").exists()
    # The key never reached anything install.sh keeps or prints.
    assert DOOR_KEY not in installed.stdout + installed.stderr
    kept = [path for path in release.rglob("*") if path.is_file() and ".venv" not in path.parts]
    assert all(DOOR_KEY.encode() not in path.read_bytes() for path in kept)


def test_the_installed_command_runs_from_its_locked_environment(
    site: Site, installed: subprocess.CompletedProcess[str]
) -> None:
    command = site.prefix / "current" / ".venv" / "bin" / "eval-runner"
    assert command.stat().st_mode & stat.S_IXUSR
    done = subprocess.run(
        [str(command), "--help"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout
    # Installed, not linked to a checkout: the package is inside the environment, without development tools.
    python = site.prefix / "current" / ".venv" / "bin" / "python"
    location = run(str(python), "-c", "import eval_runner; print(eval_runner.__file__)")
    assert Path(location).resolve().is_relative_to(site.release / ".venv")
    assert not (site.release / ".venv" / "bin" / "pytest").exists()


def test_a_second_install_of_the_same_commit_reuses_it(site: Site, installed: subprocess.CompletedProcess[str]) -> None:
    marker = site.release / ".venv" / "marker-of-the-first-install"
    marker.touch()
    done = site.install("--no-restart", site.commit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{site.commit} is installed already" in done.stdout
    assert "admission open" in done.stdout  # checked again all the same
    assert marker.exists()
    marker.unlink()


def test_a_failing_check_refuses_to_restart_and_leaves_current_alone(
    site: Site, installed: subprocess.CompletedProcess[str]
) -> None:
    broken = env_file(
        site.root / "broken.env",
        site.root / "state",
        site.temp,
        EVAL_RUNNER_CODER=str(site.root / "no-such-agent"),
        EVAL_RUNNER_RUNS_PER_DAY="0",
    )
    before = os.readlink(site.prefix / "current")
    done = site.install(site.commit, env_file=broken)  # no --no-restart: only the failed check stops it
    assert done.returncode == 1
    assert "eval-runner: EVAL_RUNNER_RUNS_PER_DAY is an emergency brake" in done.stdout
    assert "check failed (above): not restarting" in done.stderr
    assert site.systemctl_calls() == []
    assert os.readlink(site.prefix / "current") == before


def test_a_passing_check_installs_the_unit_and_restarts_the_service(
    site: Site, installed: subprocess.CompletedProcess[str]
) -> None:
    done = site.install(site.commit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert site.systemctl_calls() == [
        "--user daemon-reload",
        f"--user enable --quiet {UNIT}",
        f"--user restart {UNIT}",
        f"--user status --no-pager --lines=5 {UNIT}",
    ]
    unit = site.root / "config" / "systemd" / "user" / UNIT
    assert unit.read_text() == (site.release / UNIT).read_text()
    assert f"the eval runner runs {site.commit}" in done.stdout
    site.calls.unlink()


def test_install_refuses_an_environment_file_others_can_read(site: Site) -> None:
    loose = env_file(site.root / "loose.env", site.root / "state", site.temp)
    loose.chmod(0o644)
    done = site.install("--no-restart", site.commit, env_file=loose)
    assert done.returncode == 1
    assert "is mode 644: it holds keys; chmod 600 it" in done.stderr


def test_the_rendered_unit_is_one_systemd_accepts(site: Site, installed: subprocess.CompletedProcess[str]) -> None:
    unit = (site.release / UNIT).read_text()
    # The environment file first, then the catalog file; both and the command at this prefix.
    assert unit.index(f"EnvironmentFile={site.env_file}") < unit.index(
        f"EnvironmentFile={site.prefix}/current/catalog.env"
    )
    assert f"ExecStart={site.prefix}/current/.venv/bin/eval-runner serve" in unit
    for line in ("Type=notify", "WatchdogSec=120", "Restart=on-failure", "NoNewPrivileges=yes", "KillMode=mixed"):
        assert line in unit.splitlines()
    # Options that would take user namespaces away from bubblewrap (or imply that in a user service).
    for option in ("RestrictNamespaces=", "PrivateUsers=", "ProtectSystem=", "ProtectHome=", "PrivateTmp="):
        assert not any(line.startswith(option) for line in unit.splitlines()), option
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this host (the unit's text was checked above)")
    runtime = site.root / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    done = subprocess.run(
        [analyze, "--user", "verify", str(site.release / UNIT)],
        env={**site.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # verify exits 0 with unknown keys too: any line it prints about the unit is a finding.
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout + done.stderr == ""


def test_a_wrong_command_line_is_refused_with_the_usage() -> None:
    for args in (["--bogus"], ["one", "two"], ["--prefix"]):
        done = subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 64, args
        assert done.stderr.startswith("usage: deploy/install.sh [--source REPO]"), done.stderr
