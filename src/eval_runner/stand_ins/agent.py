#!/usr/bin/env python3
"""STAND-IN AGENT — not a real agent. It stands in for OpenAgents' `coder` in the runner's own tests.

A real run starts `coder`, an LLM agent we do not control; tests start this script instead. It does no
reasoning: it obeys the child contract (runner.md §13.4 steps 8–9) and behaves like the reference's fake
agent (runner.md §21), so that a run, its sandbox, its door proxy and its graders can be exercised
end to end and deterministically.

    stand_in_agent.py --prompt-file PATH | -p TEXT  [--trace PATH.atif.jsonl]  [--json]

* Asks its door once: `POST $CODER_DOOR_URL/v1/responses` with `Authorization: Bearer $CODER_DOOR_KEY`,
  model `$CODER_MODEL`, the prompt as input and the guidance file `$CODER_GUIDANCE` as `instructions`
  (refusing to run when its digest is not `$CODER_GUIDANCE_DIGEST`).
* Writes an ATIF-v1.8 log at --trace (a `session` record, `step`s, an `end`), one synced line at a time.
* When `$CODER_PROGRAMS` is set and not `none` and the prompt mentions "repository" or "callers", records
  one call per step of every program under `$HOME/.openagents/programs/*.json`: named by the step, with
  `extra.step` = the step name and `extra.program` = the program slug (the file stem), and the step's
  module operation as `arguments.operation` when the binding names one — every kind of extension
  operation name runner.md §13.2 lists, so `operation_used` graders can find it.
* Prints a final JSON line `{"reply", "outcome", "cost_usd": 0.001, "error"}` on stdout.
* `OA_EVAL_FAKE` adds behaviour: `sleep` prints `{"pid": N}` and sleeps until stopped; `wait` asks the
  door once (so a test knows the turn began), then does the same; `env` prints the environment to stdout
  as `NAME=value` lines; `write` writes the reply to `summary.md` in the working directory; `canary`
  replies whether the file named by `OA_EVAL_CANARY` can be read; `replay` plays what the door scripts
  (`{"trajectory": ATIF document, "files": {path: text}, "cost_usd": n|null, "sleep": bool}`): it writes
  the trajectory document at --trace, the files in the working directory, and the cost, or sleeps until
  stopped — how the reference's scenario suite is replayed through a real sandbox.

It must run under a bare `/usr/bin/python3` with an empty environment plus the contract's variables
(the sandbox clears the environment), so it imports the standard library only and never `eval_runner`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "ATIF-v1.8"
VERSION = "0.0.0"
COST_USD = 0.001
DOOR_TIMEOUT_SECONDS = 120


class DoorError(Exception):
    """The door gave no usable answer (the message never holds the key)."""


class TraceLog:
    """An ATIF log, appended and synced a line at a time, so a killed agent loses at most one line."""

    def __init__(self, path: Path | None, session: dict[str, Any]) -> None:
        self._file: Any = None
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # 0644, not 0600: the sandbox may run as another uid than the runner that reads the log.
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return  # an existing log is never overwritten; the turn goes on unrecorded
        self._file = os.fdopen(descriptor, "wb")
        self._write({"record": "session", "schema_version": SCHEMA_VERSION, "at": now_ms(), "session": session})

    def step(self, source: str, message: str, call: dict[str, Any] | None = None) -> None:
        step: dict[str, Any] = {"at": now_ms(), "source": source, "message": message}
        if call is not None:
            step["call"] = call
        self._write({"record": "step", "step": step})

    def finish(self) -> None:
        self._write({"record": "end", "at": now_ms(), "state": "ended"})
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        self._file.write(line.encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def summary(reply: str | None, outcome: str, error: str | None) -> None:
    print(json.dumps({"reply": reply, "outcome": outcome, "cost_usd": COST_USD, "error": error}), flush=True)


def fail(log: TraceLog, why: str) -> int:
    log.step("System", why)
    log.finish()
    summary(None, "failed", why)
    return 1


def ask(guidance: str, prompt: str) -> str:
    """One Open Responses call through the door; the text of the first assistant message."""
    url = os.environ.get("CODER_DOOR_URL", "")
    key = os.environ.get("CODER_DOOR_KEY", "")
    if not url:
        raise DoorError("no door")
    if not key:
        raise DoorError("no door key")
    if not url.startswith(("http://", "https://")):
        raise DoorError("the door URL is not http or https")
    body = {
        "model": os.environ.get("CODER_MODEL", ""),
        "instructions": guidance,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}],
        "stream": False,
    }
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url.rstrip("/") + "/v1/responses",
        data=json.dumps(body).encode("utf-8"),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=DOOR_TIMEOUT_SECONDS) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        raise DoorError(f"door answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DoorError(f"door: {getattr(exc, 'reason', exc)}") from None
    try:
        value = json.loads(raw)
    except ValueError:
        raise DoorError("the door's answer is not JSON") from None
    return reply_text(value)


def reply_text(value: Any) -> str:
    output = value.get("output") if isinstance(value, dict) else None
    for item in output if isinstance(output, list) else []:
        content = item.get("content") if isinstance(item, dict) and item.get("type") == "message" else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return str(part["text"])
    return ""


def program_calls(directory: Path) -> list[dict[str, Any]]:
    """One call per step of every admitted program, in file-name order (a stepless program: one call)."""
    try:
        files = sorted(path for path in directory.iterdir() if path.suffix == ".json" and path.is_file())
    except OSError:
        return []
    calls: list[dict[str, Any]] = []
    for path in files:
        try:
            program = json.loads(path.read_bytes())
        except (OSError, ValueError):
            continue
        if not isinstance(program, dict):
            continue
        slug = path.stem
        steps = _pointer(program, "definition", "steps")
        names = [s["name"] for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str) and s["name"]]
        for name in names or [slug]:
            operation = _pointer(program, "binding", "steps", name, "module", "operation")
            calls.append(
                {
                    "id": f"call-{slug}-{name}",
                    "name": name,
                    "arguments": {"operation": operation} if isinstance(operation, str) and operation else {},
                    "output": "",
                    "outcome": "Completed",
                    "milliseconds": 1,
                    "extra": {"step": name, "program": slug} if names else {"program": slug},
                }
            )
    return calls


def _pointer(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if value is not None else []


def canary_report() -> str:
    canary = os.environ.get("OA_EVAL_CANARY", "")
    try:
        with open(canary, "rb") as handle:
            handle.read(1)
        readable = True
    except OSError:
        readable = False
    try:
        os.stat(canary)
        listed = True
    except OSError:
        listed = False
    return f"canary: {'readable' if readable else 'unreadable'}; home canary listed: {str(listed).lower()}"


def replay(prompt: str, trace: Path | None) -> int:
    """Ask the door for the turn to play, then play it (see the module docstring)."""
    try:
        guidance = Path(os.environ["CODER_GUIDANCE"]).read_text(encoding="utf-8")
    except (KeyError, OSError, ValueError):
        guidance = ""
    try:
        script = json.loads(ask(guidance, prompt))
    except (DoorError, ValueError) as exc:
        summary(None, "failed", f"no turn to replay: {exc}")
        return 1
    if not isinstance(script, dict):
        summary(None, "failed", "the turn to replay is not an object")
        return 1
    if script.get("sleep") is True:
        print(json.dumps({"pid": os.getpid()}), flush=True)
        while True:
            time.sleep(1)
    document = script.get("trajectory")
    if trace is not None and isinstance(document, dict):
        trace.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    files = script.get("files")
    for name, text in (files if isinstance(files, dict) else {}).items():
        target = Path.cwd() / str(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(text), encoding="utf-8")
    cost = script.get("cost_usd")
    cost = cost if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    print(json.dumps({"reply": None, "outcome": "answered", "cost_usd": cost, "error": None}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stand-in-agent", description="A stand-in for coder, for tests.")
    parser.add_argument("--prompt-file")
    parser.add_argument("-p", dest="prompt")
    parser.add_argument("--trace")
    parser.add_argument("--json", action="store_true")
    args, _ = parser.parse_known_args(argv)
    prompt = args.prompt or ""
    if args.prompt_file:
        try:
            prompt = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, ValueError):
            prompt = args.prompt or ""
    mode = os.environ.get("OA_EVAL_FAKE", "")
    model = os.environ.get("CODER_MODEL") or "stand-in"
    session = {
        "id": "stand-in-session",
        "model": model,
        "door": "stand-in",
        "repository": os.getcwd(),
        "directive": "",
        "state": "",
        "seconds": 0,
        "version": VERSION,
    }
    if mode == "replay":
        return replay(prompt, Path(args.trace) if args.trace else None)
    log = TraceLog(Path(args.trace) if args.trace else None, session)
    log.step("User", prompt)

    if mode == "env":
        for name, value in sorted(os.environ.items()):
            print(f"{name}={value}")
        sys.stdout.flush()
    if mode == "sleep":
        print(json.dumps({"pid": os.getpid()}), flush=True)
        while True:
            time.sleep(1)
    if mode == "wait":
        with contextlib.suppress(DoorError):
            ask("", prompt)  # the door learns the turn began, then the turn never ends
        print(json.dumps({"pid": os.getpid()}), flush=True)
        while True:
            time.sleep(1)

    guidance_bytes = b""
    if os.environ.get("CODER_GUIDANCE"):
        try:
            guidance_bytes = Path(os.environ["CODER_GUIDANCE"]).read_bytes()
        except OSError:
            guidance_bytes = b""
    expected = os.environ.get("CODER_GUIDANCE_DIGEST")
    if expected is not None and "sha256:" + hashlib.sha256(guidance_bytes).hexdigest() != expected:
        return fail(log, "guidance digest mismatch")
    guidance = guidance_bytes.decode("utf-8", "replace")

    programs = os.environ.get("CODER_PROGRAMS", "")
    asks_for_a_map = "repository" in prompt.lower() or "callers" in prompt.lower()
    if programs and programs != "none" and asks_for_a_map:
        for call in program_calls(Path(os.environ.get("HOME", "/nonexistent")) / ".openagents" / "programs"):
            log.step("Agent", "", call)

    reply: str | None = None
    why = ""
    try:
        reply = ask(guidance, prompt)
    except DoorError as exc:
        why = str(exc)
    if mode == "canary":
        reply = canary_report()
    if reply is None:
        return fail(log, why)
    if mode == "write":
        (Path.cwd() / "summary.md").write_text(reply, encoding="utf-8")
    log.step("Agent", reply)
    log.finish()
    summary(reply, "answered", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
