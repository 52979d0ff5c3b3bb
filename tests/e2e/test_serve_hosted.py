"""The whole hosted path through `eval-runner serve`, and the secret scan over everything it left.

A trainer sends a run of the example extension's two cases (one run per arm, a judge grader added to the
should-fire case) to the runner's embedded relay; the runner runs it in real sandboxes with the stand-in
agent and the stand-in door, judges through the chat door, seals the report to the trainer and answers.
Then the runner is stopped and every secret it held (the door key, the decision doors' keys, its own
secret key as hex and as nsec) is looked for in every event the trainer was sent, every event the relay
kept, every decrypted answer and the sealed report, every line the runner logged, and every file under
its state directory and temp root (the ledger, the relay's LMDB store, results). The key file itself is
outside them (`EVAL_RUNNER_KEY_FILE`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nostr_sdk as sdk
import pytest

from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Filter, SecretKey
from eval_runner.service.relay.connection import RelayClient
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, runner_env, serving
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input

TYPESAFE_KEY = "typesafe-key-e2e-never-kept-90c2e4"
OPENROUTER_KEY = "openrouter-key-e2e-never-kept-7b15aa"
JUDGE = '+++\ntype = "judge"\n+++\n\nThe reply names src/tables.rs as the largest file.\n'


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def judged_run() -> dict[str, JsonValue]:
    found = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    overview = example_case("overview")
    graders = overview["graders"]
    assert isinstance(graders, list)
    judged: JsonValue = {"name": "judged", "text": JUDGE}
    overview["graders"] = sorted([*graders, judged], key=lambda grader: str(grader["name"]))
    return run_input(found, draft(catalog_tool(found), [example_case("greeting"), overview]), runs=1)


def holding(blob: bytes, secrets: dict[str, bytes]) -> list[str]:
    return [name for name, secret in secrets.items() if secret in blob]


async def test_the_hosted_path_through_serve_keeps_no_secret_anywhere(tmp_path: Path, temp_root: Path) -> None:
    secret = SecretKey.generate()
    key_file = tmp_path / "keys" / "runner-key"
    key_file.parent.mkdir()
    key_file.write_text(secret.to_hex() + "\n")
    key_file.chmod(0o600)
    runner = secret.public_key().to_hex()
    phone = SecretKey.generate()
    secrets = {
        "door key": DOOR_KEY.encode(),
        "TypeSafe key": TYPESAFE_KEY.encode(),
        "OpenRouter key": OPENROUTER_KEY.encode(),
        "runner secret (hex)": secret.to_hex().encode(),
        "runner secret (nsec)": secret.to_bech32().encode(),
        "runner secret (bytes)": secret.to_bytes(),
    }
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(
            tmp_path,
            temp_root,
            door_url=door.url,
            listen="127.0.0.1:0",
            key_file=key_file,
            TYPESAFE_API_KEY=TYPESAFE_KEY,
            OPENROUTER_API_KEY=OPENROUTER_KEY,
        )
        async with serving(env) as process:
            assert await process.runner() == runner
            url = await process.url()
            async with Trainer(url, runner, phone) as trainer:
                event, _ = await trainer.run(judged_run(), "req-hosted")
                result = await trainer.result(event)
                assert result.outcome == "completed", result
                output = result.output
                assert isinstance(output, RunOutput)
                # With the skill the agent names the language and the largest file; without it, it can't.
                assert (output.headline.subject_passed, output.headline.baseline_passed, output.headline.total) == (
                    2,
                    1,
                    2,
                )
                sent = trainer.sent[event.id]
                assert len(sent.accepted) == 1
                assert [note.completed for note in sent.progress if note.status == "running"] == [0, 1, 2, 3, 4]
                sealed_event, envelope = await trainer.open_sealed(output.sealed)
                assert envelope is not None
                plaintexts = [
                    sdk.nip44_decrypt(
                        sdk.SecretKey.parse(phone.to_hex()), sdk.PublicKey.parse(runner), received.content
                    ).encode()
                    for received in [*trainer.received, sealed_event]
                ]
                kept = await RelayClient(url, phone, challenge_wait=0.05).query(Filter.build(authors=[runner]))
                received = [json.dumps(item.to_json()).encode() for item in trainer.received]
            assert await process.terminate() == 0
    assert {judge.kind for judge in door.calls} == {"answer", "judge"}, "the judge grader asked the chat door"
    assert sealed_event.id in {item.id for item in kept}

    found: dict[str, list[str]] = {}
    for number, blob in enumerate(received):
        found.update({f"event {number}": holding(blob, secrets)})
    for item in kept:
        found.update({f"kept {item.id[:12]}": holding(json.dumps(item.to_json()).encode(), secrets)})
    for number, plaintext in enumerate(plaintexts):
        found.update({f"answer {number}": holding(plaintext, secrets)})
    found["log"] = holding(process.text.encode(), secrets)
    scanned = 0
    for root in (tmp_path / "state", temp_root):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                scanned += 1
                found[str(path)] = holding(path.read_bytes(), secrets)
    assert scanned > 20, "the state holds the ledger, the relay's store and the results"
    assert {where: names for where, names in found.items() if names} == {}
