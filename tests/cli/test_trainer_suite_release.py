"""`eval-runner trainer run --suite-release ID` as a real subprocess over nostr-sdk's LocalRelay: the trainer reads
the `3184` by id, names it `{id, pubkey: its signer, kind: 3184}` in the request, and refuses before sending
when the release is not on the relay or does not read as a release. Usage errors exit 64. (A whole run of a
published test set is tests/e2e/test_serve_published.py.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

from eval_runner.nostr import SecretKey
from eval_runner.service.relay.connection import RelayClient
from tests.support.paths import EXAMPLE
from tests.support.published_suites import example_release, spelled
from tests.support.stand_in_relay import BOUND, local_relay

COMMAND = (sys.executable, "-m", "eval_runner.cli", "trainer")
WITHIN = 6 * BOUND
AUTHOR = SecretKey(hashlib.sha256(b"trainer-suite-release: author").digest())
OTHER = SecretKey(hashlib.sha256(b"trainer-suite-release: other").digest())


async def trainer(*args: str) -> tuple[int, str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("EVAL_RUNNER_")}
    process = await asyncio.create_subprocess_exec(
        *COMMAND, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(process.communicate(), WITHIN)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def settings(tmp_path: Path, url: str) -> list[str]:
    key = tmp_path / "trainer-key"
    if not key.exists():
        key.write_text(SecretKey.generate().to_hex() + "\n")
        key.chmod(0o600)
    runner = SecretKey.generate().public_key().to_hex()
    return ["--relay", url, "--runner", runner, "--key-file", str(key), "--requests", str(tmp_path / "requests")]


async def test_the_request_names_the_release_by_its_signer_read_from_the_relay(tmp_path: Path) -> None:
    good = spelled(example_release(AUTHOR.public_key().to_hex())).signed(AUTHOR)
    async with local_relay() as url:
        await RelayClient(url, AUTHOR, challenge_wait=0.05).publish(good)
        code, out, _ = await trainer(
            "run", "--suite-release", good.id, "--extension", str(EXAMPLE), "--runs", "2", "--json",
            "--timeout", "0.5", *settings(tmp_path, url),
        )  # fmt: skip
    assert code == 1, "no runner answers on this relay"
    found = json.loads(out)
    assert found["silence"] == "worker_absent"
    [record] = (tmp_path / "requests").glob("*.json")
    sent = json.loads(record.read_text())["body"]["input"]
    assert sent["suite"] == {"id": good.id, "pubkey": AUTHOR.public_key().to_hex(), "kind": 3184}
    assert (sent["draft"], sent["runs"]) == (None, 2)
    assert sent["subject"]["id"].endswith(":codebase-brief/codebase-brief")


async def test_a_release_not_on_the_relay_or_not_a_release_is_refused_before_sending(tmp_path: Path) -> None:
    stranger = spelled(example_release(AUTHOR.public_key().to_hex())).signed(OTHER)  # not the package root
    async with local_relay() as url:
        await RelayClient(url, OTHER, challenge_wait=0.05).publish(stranger)
        common = settings(tmp_path, url)
        absent = await trainer("run", "--suite-release", "ab" * 32, "--extension", str(EXAMPLE), *common)
        wrong = await trainer("run", "--suite-release", stranger.id, "--extension", str(EXAMPLE), *common)
        garbled = await trainer("run", "--suite-release", "not-an-id", "--extension", str(EXAMPLE), *common)
    assert absent[0] == 1
    assert f"the release {'ab' * 32} isn't on the relay" in absent[2]
    assert wrong[0] == 1
    assert f"the release {stranger.id} doesn't check: " in wrong[2]
    assert "a release is signed by its package root" in wrong[2]
    assert garbled[0] == 1
    assert "the 64-hex id of a 3184 release" in garbled[2]
    assert not (tmp_path / "requests").exists() or list((tmp_path / "requests").iterdir()) == [], "nothing was sent"


async def test_suite_release_usage_errors_exit_64(tmp_path: Path) -> None:
    common = settings(tmp_path, "ws://127.0.0.1:9")
    draft = tmp_path / "draft.json"
    draft.write_text("{}")
    wrong = {
        "with a draft": ["run", "--suite-release", "ab" * 32, "--draft", str(draft), "--extension", str(EXAMPLE)],
        "with a suite": ["run", "--suite-release", "ab" * 32, "--suite", str(EXAMPLE / "evals")],
        "without a subject": ["run", "--suite-release", "ab" * 32],
        "with a retransmission": ["run", "--suite-release", "ab" * 32, "--retransmit", "x"],
    }
    for what, args in wrong.items():
        code, _, err = await trainer(*args, *common)
        assert code == 64, (what, err)
    code, _, err = await trainer("run", "--suite-release", "ab" * 32, *common)
    assert "--suite-release needs --subject or --extension" in err
