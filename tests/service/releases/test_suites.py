"""A test set as a suite release, byte for byte: the example extension's and the reference's scenario suite.

The constants were computed once with this code (`suite_release(load_suite(<dir>/evals), author=…,
package=…, gate_file=<the vendored ext-eval-v2 gate>)`, then `release.suite`, `release.manifest_ref` and
`release.content`) and pinned, so any change to what a release says is seen here. The stored reference
sources hold no suite release, manifest or 3184 vector to compare with (its runner tests compute theirs at
run time); the scenario suite's `cases.json` and `suite.json` are held to the reference's own digests by
`tests/engine/test_reference_scenarios.py`.
"""

from __future__ import annotations

import hashlib

import pytest

from eval_runner.contracts.hosted import RUNNER
from eval_runner.contracts.package import Manifest, read_release
from eval_runner.contracts.suite import check_suite_package
from eval_runner.engine.testset.cases import load_suite
from eval_runner.nostr import SecretKey, sign
from eval_runner.service.releases import ReleaseError, suite_release
from tests.support.paths import EXAMPLE, REFERENCE

GATE = (REFERENCE / "gates" / "ext-eval-v2.json").read_bytes()
SCENARIO_SUITE = REFERENCE / "ext-eval-scenarios" / "suite" / "evals"
#: The reference scenario test's suite author (tests/engine/test_reference_scenarios.py).
SCENARIO_AUTHOR = "5be6446aef0a9a6b1f2c3d4e5f6071829a4b5c6d7e8f90112233445566778899"

EXAMPLE_SUITE = ("sha256:3f008672646083a6e2ead7e2b0bc8ed801a80880cca33e2d926f3b1c2abe158d", 1790)
EXAMPLE_MANIFEST = ("sha256:039341dece488522062e31ff7e355aad5a6de42dbab2309b4434bfdd18b50667", 3809)
EXAMPLE_CONTENT = (
    '{"manifest":{"digest":"sha256:039341dece488522062e31ff7e355aad5a6de42dbab2309b4434bfdd18b50667",'
    '"media_type":"application/json","schema":"openagents.package.v1","size":3809},'
    '"package":"a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0:codebase-brief-tests",'
    '"requires":[],"type":"release","v":1,"version":"suite-3f0086726460"}'
)
SCENARIO_SUITE_REF = ("sha256:e4a585d67949a96f4586a8041c09337e9cbafae9f530d8759dd996a459227fba", 1784)
SCENARIO_MANIFEST = ("sha256:abdc52450d99e5f62a665589ea3020061dac736f2d5e72f691e2bd79cdd38ec0", 3754)
SCENARIO_CONTENT = (
    '{"manifest":{"digest":"sha256:abdc52450d99e5f62a665589ea3020061dac736f2d5e72f691e2bd79cdd38ec0",'
    '"media_type":"application/json","schema":"openagents.package.v1","size":3754},'
    '"package":"5be6446aef0a9a6b1f2c3d4e5f6071829a4b5c6d7e8f90112233445566778899:repo-map-tests",'
    '"requires":[],"type":"release","v":1,"version":"suite-e4a585d67949"}'
)


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_the_example_suite_release_is_the_pinned_one() -> None:
    release = suite_release(
        load_suite(EXAMPLE / "evals"), author=RUNNER, package="codebase-brief-tests", gate_file=GATE
    )
    assert (release.suite.digest, release.suite.size) == EXAMPLE_SUITE
    assert (digest(release.manifest), len(release.manifest)) == EXAMPLE_MANIFEST
    assert (release.manifest_ref.digest, release.manifest_ref.size) == EXAMPLE_MANIFEST
    assert release.content == EXAMPLE_CONTENT
    assert release.package == f"{RUNNER}:codebase-brief-tests"
    assert release.version == "suite-3f0086726460"
    assert release.unsigned.kind == 3184
    assert release.unsigned.tags == (("t", "oa:ext:release:v1"),)


def test_the_reference_scenario_suite_release_is_the_pinned_one() -> None:
    release = suite_release(
        load_suite(SCENARIO_SUITE), author=SCENARIO_AUTHOR, package="repo-map-tests", gate_file=GATE
    )
    assert (release.suite.digest, release.suite.size) == SCENARIO_SUITE_REF
    assert (digest(release.manifest), len(release.manifest)) == SCENARIO_MANIFEST
    assert release.content == SCENARIO_CONTENT
    assert [(file.path, file.media_type) for file in release.files] == [
        ("suite.json", "application/json"),
        ("cases.json", "application/json"),
        ("evals/find-callers/prompt.md", "text/markdown"),
        ("evals/find-callers/graders/answer.md", "text/markdown"),
        ("evals/find-callers/graders/judged.md", "text/markdown"),
        ("evals/find-callers/graders/used-map.md", "text/markdown"),
        ("evals/map-only/prompt.md", "text/markdown"),
        ("evals/map-only/graders/used.md", "text/markdown"),
        ("evals/typo-fix/prompt.md", "text/markdown"),
        ("evals/typo-fix/graders/fixed.md", "text/markdown"),
        ("evals/typo-fix/graders/no-map.md", "text/markdown"),
        ("evals/write-summary/prompt.md", "text/markdown"),
        ("evals/write-summary/case.toml", "application/toml"),
        ("evals/write-summary/graders/summary-mentions.md", "text/markdown"),
        ("evals/write-summary/fixtures/README.md", "text/markdown"),
    ]


def test_the_manifest_lists_every_file_by_digest_and_is_a_suite_package_a_reader_accepts() -> None:
    release = suite_release(
        load_suite(EXAMPLE / "evals"), author=RUNNER, package="codebase-brief-tests", gate_file=GATE
    )
    manifest = Manifest.parse_bytes(release.manifest)
    assert [(file.path, file.digest, file.size, file.media_type) for file in manifest.files] == [
        (file.path, digest(file.data), len(file.data), file.media_type) for file in release.files
    ]
    files = {file.path: file.data for file in release.files}
    package = check_suite_package(manifest, files["suite.json"], files["cases.json"])
    assert package.slug == "suite"
    assert package.suite.id == f"{RUNNER}:codebase-brief-tests/suite"
    assert package.suite.acceptance.artifact.digest == digest(GATE)
    assert release.files[0].data == files["suite.json"]
    assert release.suite.matches(files["suite.json"])
    fixture = files["evals/overview/fixtures/src/lib.rs"]
    assert fixture == (EXAMPLE / "evals/overview/fixtures/src/lib.rs").read_bytes()
    assert [upload.path for upload in release.uploads()] == ["manifest.json", *files]


def test_the_release_event_reads_back_as_the_package_and_manifest_it_was_made_for() -> None:
    author = SecretKey.generate()
    release = suite_release(
        load_suite(EXAMPLE / "evals"),
        author=author.public_key().to_hex(),
        package="codebase-brief-tests",
        gate_file=GATE,
    )
    event = sign(author, release.unsigned.kind, release.unsigned.tags, release.unsigned.content, 1_790_000_000)
    read = read_release(event)
    assert (read.package, read.version, read.manifest) == (release.package, release.version, release.manifest_ref)


def test_another_gate_or_author_is_another_suite_and_another_release() -> None:
    suite = load_suite(EXAMPLE / "evals")
    first = suite_release(suite, author=RUNNER, package="codebase-brief-tests", gate_file=GATE)
    other_gate = suite_release(suite, author=RUNNER, package="codebase-brief-tests", gate_file=GATE + b"\n")
    other_author = suite_release(suite, author="b" * 64, package="codebase-brief-tests", gate_file=GATE)
    assert len({first.suite.digest, other_gate.suite.digest, other_author.suite.digest}) == 3
    assert len({first.content, other_gate.content, other_author.content}) == 3


@pytest.mark.parametrize(
    ("author", "package", "component"),
    [("not-a-key", "codebase-brief-tests", "suite"), (RUNNER, "Not A Slug", "suite"), (RUNNER, "tests", "Bad/Part")],
)
def test_a_suite_that_cannot_be_named_so_is_a_testset_error(author: str, package: str, component: str) -> None:
    with pytest.raises(ReleaseError) as raised:
        suite_release(
            load_suite(EXAMPLE / "evals"), author=author, package=package, gate_file=GATE, component=component
        )
    assert raised.value.code == "testset"
    assert "suite" in str(raised.value)


def test_the_example_directory_is_the_one_the_constants_were_computed_from() -> None:
    """A guard that says which input moved when the pinned values stop matching."""
    listed = sorted(
        str(path.relative_to(EXAMPLE / "evals")) for path in (EXAMPLE / "evals").rglob("*") if path.is_file()
    )
    assert len(listed) == 13
    assert digest(GATE) == "sha256:73e17f106b1e445884f93741416cafa63ce4f59b4b6ab3074481d6754073ad39"
