#!/usr/bin/env bash
# Installs one commit of eval-runner as the user service `eval-runner`, and restarts it only if
# `eval-runner check` passes with the installed code, the environment file and the catalog.
#
#   deploy/install.sh [--source REPO] [--prefix DIR] [--env-file FILE] [--no-restart] [COMMIT]
#
# COMMIT (default origin/main, fetched first) is installed into <prefix>/releases/<full commit>: its tree
# (git archive, nothing else of the checkout), a locked environment (`uv sync --frozen --no-dev
# --no-editable` into its .venv), REVISION, catalog.env (EVAL_RUNNER_CATALOG from its deploy/catalog, as
# absolute paths into the release) and eval-runner.service (the unit, with this prefix and environment
# file). Then `eval-runner check` runs with the environment file and the catalog file read as the unit reads
# them. Only when it passes does <prefix>/current move to the release; then the unit is installed into
# ~/.config/systemd/user, reloaded, enabled and restarted (--no-restart skips that step). A check that fails
# changes nothing that runs: current, the unit and the service stay as they were, and the exit code is 1.
#
# Rerunnable: a release already installed is reused (`current` moves back to it: that is a rollback), a
# half-made one is made again, and two installs at once wait for each other.
#
# Defaults: --source the repository this script is in; --prefix $EVAL_RUNNER_HOME, else
# ~/.local/lib/eval-runner; --env-file ~/.config/eval-runner/eval-runner.env (it must exist, mode 600).
set -euo pipefail

UNIT=eval-runner.service
DEFAULT_PREFIX='%h/.local/lib/eval-runner'
DEFAULT_ENV_FILE='%h/.config/eval-runner/eval-runner.env'
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

say() { printf 'install: %s\n' "$*"; }
fail() {
  printf 'install: %s\n' "$*" >&2
  exit 1
}
usage() {
  sed -n '5p' "${BASH_SOURCE[0]}" | sed 's/^#   /usage: /' >&2
  exit 64
}

source_repo="$(cd "$here/.." && pwd)"
prefix="${EVAL_RUNNER_HOME:-$HOME/.local/lib/eval-runner}"
config_home="${XDG_CONFIG_HOME:-$HOME/.config}"
env_file="$config_home/eval-runner/eval-runner.env"
restart=1
commit=""
while [ $# -gt 0 ]; do
  case "$1" in
    --source) [ $# -ge 2 ] || usage; source_repo="$2"; shift 2 ;;
    --prefix) [ $# -ge 2 ] || usage; prefix="$2"; shift 2 ;;
    --env-file) [ $# -ge 2 ] || usage; env_file="$2"; shift 2 ;;
    --no-restart) restart=0; shift ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) usage ;;
    *) [ -z "$commit" ] || usage; commit="$1"; shift ;;
  esac
done

# --- what is installed, from where --------------------------------------------------------------------
[ -f "$env_file" ] || fail "there's no environment file at $env_file; copy deploy/eval-runner.env.example there (mode 600) and fill it in first"
mode="$(stat -c '%a' "$env_file")"
[ "$mode" = 600 ] || [ "$mode" = 400 ] || fail "the environment file $env_file is mode $mode: it holds keys; chmod 600 it"
mkdir -p "$prefix/releases"
prefix="$(cd "$prefix" && pwd)"
env_file="$(cd "$(dirname "$env_file")" && pwd)/$(basename "$env_file")"
git -C "$source_repo" rev-parse --git-dir >/dev/null 2>&1 || fail "$source_repo is not a git repository"
if [ -z "$commit" ]; then
  git -C "$source_repo" fetch --quiet origin || fail "could not fetch origin in $source_repo; name a commit"
  commit=origin/main
fi
sha="$(git -C "$source_repo" rev-parse --verify --quiet "$commit^{commit}")" || fail "$commit is not a commit in $source_repo"

if command -v uv >/dev/null 2>&1; then
  UV=(uv)
elif python3 -m uv --version >/dev/null 2>&1; then
  UV=(python3 -m uv)
else
  fail "uv is not installed (python3 -m pip install --user uv)"
fi

# One install at a time per prefix.
exec 9>"$prefix/.install.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

# --- the release: the commit's tree and its locked environment ----------------------------------------
release="$prefix/releases/$sha"
if [ -f "$release/.installed" ]; then
  say "$sha is installed already in $release"
else
  rm -rf "$release"
  mkdir -p "$release"
  say "installing $sha into $release"
  git -C "$source_repo" archive --format=tar "$sha" | tar -x -C "$release"
  # The environment is made where it stays: its scripts name their interpreter by absolute path.
  (cd "$release" && UV_PROJECT_ENVIRONMENT="$release/.venv" "${UV[@]}" sync --frozen --no-dev --no-editable --quiet)
  printf '%s\n' "$sha" >"$release/REVISION"

  # The catalog, as absolute paths into this release (runner.md §4's catalog.env).
  [ -f "$release/deploy/catalog" ] || fail "$sha has no deploy/catalog"
  catalog=""
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%%#*}"
    line="$(printf '%s' "$line" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')"
    [ -n "$line" ] || continue
    [ -d "$release/$line" ] || fail "deploy/catalog names $line, which $sha does not have"
    catalog="${catalog:+$catalog:}$release/$line"
  done <"$release/deploy/catalog"
  [ -n "$catalog" ] || fail "deploy/catalog names no extension directory"
  printf 'EVAL_RUNNER_CATALOG=%s\n' "$catalog" >"$release/catalog.env.tmp"
  mv -f "$release/catalog.env.tmp" "$release/catalog.env"

  # The unit, naming this prefix and environment file where they are not the defaults.
  home_prefix="${prefix/#$HOME\//%h/}"
  home_env_file="${env_file/#$HOME\//%h/}"
  sed -e "s|$DEFAULT_PREFIX|$home_prefix|g" -e "s|$DEFAULT_ENV_FILE|$home_env_file|g" \
    "$release/deploy/$UNIT" >"$release/$UNIT"
  touch "$release/.installed"
fi

# --- check, with the files the unit reads, in the order it reads them ---------------------------------
say "eval-runner check"
set +e
env -i HOME="$HOME" PATH="$PATH" LANG="${LANG:-C.UTF-8}" USER="${USER:-$(id -un)}" \
  bash -c 'set -a; . "$1"; . "$2"; set +a; exec "$3" check' check "$env_file" "$release/catalog.env" \
  "$release/.venv/bin/eval-runner" 2>&1 | tee "$release/CHECK"
checked="${PIPESTATUS[0]}"
set -e
if [ "$checked" != 0 ]; then
  fail "check failed (above): not restarting; $prefix/current and the service stay as they were"
fi

ln -sfn "releases/$sha" "$prefix/current.new"
mv -Tf "$prefix/current.new" "$prefix/current"
say "$prefix/current is $sha"

if [ "$restart" = 0 ]; then
  say "not restarting (--no-restart); the unit for this release is $release/$UNIT"
  exit 0
fi
unit_dir="$config_home/systemd/user"
mkdir -p "$unit_dir"
install -m 0644 "$release/$UNIT" "$unit_dir/$UNIT.new"
mv -f "$unit_dir/$UNIT.new" "$unit_dir/$UNIT"
systemctl --user daemon-reload
systemctl --user enable --quiet "$UNIT"
systemctl --user restart "$UNIT"
say "the eval runner runs $sha"
systemctl --user status --no-pager --lines=5 "$UNIT" || true
