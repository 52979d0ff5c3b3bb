"""A published test set through real processes: `eval-runner serve` over its embedded relay and embedded blob
server; the example's suite released by the runner's key (`service.releases`); `eval-runner trainer run
--suite-release` sent by a second key, which learns the release's signer from the relay. The run completes in
real sandboxes (the stand-in agent and door), and the sealed report names the suite by its release.

Then four spoiled releases are each refused with their code, and nothing runs for them: a file whose bytes
were changed in the blob store (`identity_mismatch`), a file the store lost (`content_unavailable`), a
manifest listing a `..` path and a release signed by a key that is not its package's root (`not_admitted`).
The usage log shows each refusal; the runner kept one job (the completed run) and no staging directory.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import Report
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import load_suite
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobStore
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import SuiteRelease, release_suite, suite_release
from eval_runner.service.requests.published import DOES_NOT_CHECK
from eval_runner.service.usage import read
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.published_suites import blob_path, example_release, manifest_json, respelled, spelled, upload
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, free_port, runner_env, serving, trainer_command
from tests.support.trainer_side import Trainer, run_input

PROMPT = "evals/greeting/prompt.md"


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def variant(root: Path, name: str, runner: str) -> SuiteRelease:
    """The example's suite with its greeting prompt made this variant's own (so spoiling that blob spoils only
    this release), released as `<runner>:<name>`."""
    evals = root / name / "evals"
    shutil.copytree(EXAMPLE / "evals", evals)
    prompt = evals / "greeting" / "prompt.md"
    prompt.write_bytes(prompt.read_bytes() + f"\n(variant {name})\n".encode())
    return suite_release(load_suite(evals), author=runner, package=name, gate_file=gate_file())


async def test_a_published_test_set_runs_for_another_key_and_spoiled_releases_run_nothing(
    tmp_path: Path, temp_root: Path
) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    key_file = tmp_path / "keys" / "runner-key"
    key_file.parent.mkdir()
    key_file.write_text(secret.to_hex() + "\n")
    key_file.chmod(0o600)
    trainer_key = tmp_path / "trainer-key"
    trainer_secret = SecretKey.generate()
    trainer_key.write_text(trainer_secret.to_hex() + "\n")
    trainer_key.chmod(0o600)
    async with StandInDoor(DOOR_KEY) as door:
        env = runner_env(tmp_path, temp_root, door_url=door.url, listen=f"127.0.0.1:{free_port()}", key_file=key_file)
        async with serving(env) as serve:
            url = await serve.url()
            blobs_url = (await serve.wait_for("blobs   embedded at ")).split()[-1]
            relay = RelayClient(url, secret, challenge_wait=0.05)
            async with BlobStore([blobs_url], blobs_url, secret) as store:
                example = example_release(runner)
                good = await release_suite(example, secret=secret, blobs=store, relay=relay)

                # A second key runs it with the trainer command, knowing only the release's id.
                common = ["--relay", url, "--runner", runner, "--key-file", str(trainer_key)]
                code, out, err = await trainer_command(
                    "run", "--suite-release", good.event.id, "--extension", str(EXAMPLE), "--json",
                    "--requests", str(tmp_path / "requests"), *common,
                )  # fmt: skip
                assert code == 0, err
                found = json.loads(out)
                assert found["outcome"] == "completed", found
                assert found["headline"] == {"subject_passed": 2, "baseline_passed": 1, "total": 2}
                kept = json.loads((tmp_path / "requests" / f"{found['request']}.json").read_text())
                assert kept["body"]["input"]["suite"] == good.event.to_json()
                async with Trainer(url, runner, trainer_secret) as trainer:
                    _, envelope = await trainer.open_sealed(EventRef(found["sealed"], runner, 3188))
                    data = envelope.inline_bytes()
                    assert data is not None
                    report = Report.parse_bytes(data)
                    assert report.suite.event == good.event
                    assert report.suite.digest == example.suite.digest

                    # Four spoiled releases, each refused with its code.
                    tampered = variant(tmp_path, "tampered-tests", runner)
                    missing = variant(tmp_path, "missing-tests", runner)
                    climbing = variant(tmp_path, "climbing-tests", runner)
                    stranger = variant(tmp_path, "stranger-tests", runner)
                    pointers: dict[str, EventRef] = {}
                    for name, release in (("tampered", tampered), ("missing", missing)):
                        pointers[name] = (await release_suite(release, secret=secret, blobs=store, relay=relay)).event
                    blobs = tmp_path / "state" / "blobs"
                    blob_path(blobs, spelled(tampered).files[PROMPT]).write_bytes(b"not what was released\n")
                    blob_path(blobs, spelled(missing).files[PROMPT]).unlink()
                    manifest = manifest_json(climbing)
                    manifest["files"][2]["path"] = "evals/../../outside.md"
                    climbing_spelled = respelled(climbing, manifest)
                    await upload(climbing_spelled, store)
                    climbing_event = climbing_spelled.signed(secret)
                    await relay.publish(climbing_event)
                    pointers["climbing"] = EventRef(climbing_event.id, runner, 3184)
                    other = SecretKey.generate()
                    stranger_spelled = spelled(stranger)
                    await upload(stranger_spelled, store)
                    stranger_event = stranger_spelled.signed(other)
                    await relay.publish(stranger_event)
                    pointers["stranger"] = EventRef(stranger_event.id, other.public_key().to_hex(), 3184)

                    definition = report.subject.definition
                    subject = {"id": definition.id, "artifact": definition.artifact.to_json()}
                    results = {}
                    events: dict[str, str] = {}
                    for name, pointer in pointers.items():
                        event, _ = await trainer.run(run_input(subject, None, suite=pointer.to_json()), f"req-{name}")
                        results[name] = await trainer.result(event)
                        events[name] = event.id
            assert await serve.terminate() == 0

    expected = {
        "tampered": "identity_mismatch",
        "missing": "content_unavailable",
        "climbing": "not_admitted",
        "stranger": "not_admitted",
    }
    assert {name: (result.outcome, result.code) for name, result in results.items()} == {
        name: ("refused", code) for name, code in expected.items()
    }
    for name, result in results.items():
        assert result.message is not None
        assert result.message.startswith(DOES_NOT_CHECK), (name, result.message)
    assert "must name a file inside the package" in (results["climbing"].message or "")
    assert "a release is signed by its package root" in (results["stranger"].message or "")

    usage = read(tmp_path / "state" / "usage").records
    refused = {record.request: record for record in usage if record.outcome == "refused"}
    assert {request: (record.code, record.suite) for request, record in refused.items()} == {
        events[name]: (code, pointers[name].id) for name, code in expected.items()
    }
    completed = [record for record in usage if record.outcome == "completed"]
    assert [record.suite for record in completed] == [good.event.id]
    assert len(list((tmp_path / "state" / "jobs").iterdir())) == 1, "only the completed run has a job"
    assert [path.name for path in temp_root.iterdir() if path.name.startswith("eval-runner-suite-")] == []
