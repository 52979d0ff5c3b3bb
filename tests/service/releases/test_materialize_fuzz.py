"""Fuzz of the materializer over the real embedded Blossom server: releases whose manifest has its paths, sizes,
digests, file list or components spoiled (and now and then a release that lies about its manifest, another
signer, or blobs the store lacks) are each either materialized exactly as the example suite or refused with a
typed `MaterializeError`; nothing else escapes, nothing is ever written outside the run's staging directory
and the cache, a refusal writes nothing at all, and the cache holds only whole, checked packages.

One server and one event loop serve every example (`asyncio.Runner`); the blobs go straight into the
server's directory, and each example materializes into a staging directory of its own.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.releases.materialize import Bounds, MaterializeError, SuiteCache, materialize
from tests.support.paths import EXAMPLE
from tests.support.published_suites import Spelled, digest_of, example_release, manifest_json, respelled, shelve

AUTHOR = SecretKey(hashlib.sha256(b"materialize-fuzz: the suite's author").digest())
OTHER = SecretKey(hashlib.sha256(b"materialize-fuzz: another key").digest())
RELEASE = example_release(AUTHOR.public_key().to_hex())
MANIFEST = manifest_json(RELEASE)
PATHS = [file["path"] for file in MANIFEST["files"]]
CODES = {"content_unavailable", "identity_mismatch", "not_admitted", "too_large", "unavailable"}
BOUND = 30.0
HOSTILE_PATHS = st.sampled_from(
    [
        "evals/../../escape.md",
        "evals/greeting/../../../outside",
        "/tmp/outside",
        "evals\\..\\outside",
        "evals/./greeting/prompt.md",
        "evals//greeting//prompt.md",
        "EVALS/greeting/prompt.md",
        "evals/greeting/prompt.md/inner",
        "evals/greeting",
        "evals",
        "evals/" + "x" * 400,
        "evals/ü/prompt.md",
        "evals/greeting/graders/extra.md",
        "evals/overview/fixtures/src/lib.rs/x",
        "outside.json",
        *PATHS,
    ]
) | st.text(min_size=1, max_size=30)


@dataclass(frozen=True, slots=True)
class Spoiling:
    manifest: dict[str, Any]
    manifest_size: int | None
    signer: SecretKey
    extra: dict[str, bytes]
    withheld: frozenset[str]


def sizes(true: int) -> st.SearchStrategy[int]:
    return st.sampled_from([0, true - 1, true + 1, 2 * true, 17 * 1024 * 1024]) | st.integers(-2, 2**40)


@st.composite
def spoilings(draw: st.DrawFn) -> Spoiling:
    manifest = copy.deepcopy(MANIFEST)
    files: list[dict[str, Any]] = manifest["files"]
    extra: dict[str, bytes] = {}
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["path", "size", "digest", "drop", "duplicate", "extra", "component", "order"]))
        index = draw(st.integers(0, len(files) - 1)) if files else 0
        if not files or action == "extra":
            data = draw(st.binary(min_size=0, max_size=64))
            extra[f"extra-{len(extra)}"] = data
            files.append(
                {
                    "path": draw(HOSTILE_PATHS),
                    "digest": digest_of(data),
                    "size": draw(st.just(len(data)) | sizes(len(data))),
                    "media_type": "application/octet-stream",
                }
            )
        elif action == "path":
            files[index]["path"] = draw(HOSTILE_PATHS)
        elif action == "size":
            files[index]["size"] = draw(sizes(files[index]["size"]))
        elif action == "digest":
            other = draw(st.sampled_from(files))["digest"]
            files[index]["digest"] = draw(st.sampled_from([other, "sha256:" + "0" * 64, "sha256:" + "A" * 64]))
        elif action == "drop":
            files.pop(index)
        elif action == "duplicate":
            files.insert(draw(st.integers(0, len(files))), dict(files[index]) | {"path": draw(HOSTILE_PATHS)})
        elif action == "component":
            if not manifest["components"]:
                manifest["components"] = copy.deepcopy(MANIFEST["components"])
            component = manifest["components"][0]
            choice = draw(st.sampled_from(["twice", "kind", "size", "slug", "none"]))
            if choice == "twice":
                manifest["components"].append(dict(component) | {"slug": "again"})
            elif choice == "kind":
                component["kind"] = "guidance"
            elif choice == "size":
                component["definition"] = dict(component["definition"]) | {"size": draw(sizes(1790))}
            elif choice == "slug":
                component["slug"] = "other"
            else:
                manifest["components"] = []
        else:
            files.reverse()
    return Spoiling(
        manifest=manifest,
        manifest_size=draw(st.none() | st.none() | st.none() | sizes(4_000)),
        signer=draw(st.sampled_from([AUTHOR, AUTHOR, AUTHOR, AUTHOR, OTHER])),
        extra=extra,
        withheld=frozenset(draw(st.sets(st.sampled_from(PATHS), max_size=1)) if draw(st.integers(0, 9)) == 0 else ()),
    )


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*") if not path.is_dir()} if root.exists() else set()


def example_files() -> dict[str, bytes]:
    root = EXAMPLE / "evals"
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@dataclass
class Fuzz:
    root: Path
    server: BlobServer
    store: BlobStore
    runner: asyncio.Runner
    outcomes: Counter[str] = field(default_factory=Counter)
    numbers: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def one(self, spoiling: Spoiling) -> None:
        spelled = respelled(
            RELEASE,
            spoiling.manifest,
            manifest_size=spoiling.manifest_size,
            files=respelled(RELEASE, MANIFEST).files | spoiling.extra,
        )
        kept = Spelled(
            spelled.manifest,
            spelled.content,
            {path: data for path, data in spelled.files.items() if path not in spoiling.withheld},
        )
        shelve(kept, self.server)
        staging = self.root / "staging" / str(next(self.numbers))
        staging.mkdir(parents=True)
        before = files_under(self.root / "blobs")
        event = spelled.signed(spoiling.signer)
        work = materialize(event, self.store, staging, cache=SuiteCache(self.cache), bounds=Bounds(seconds=20))
        refusal: MaterializeError | None = None
        try:
            found = self.runner.run(asyncio.wait_for(work, BOUND))
        except MaterializeError as error:
            refusal = error
        if refusal is not None:
            assert refusal.code in CODES
            assert refusal.message
            assert files_under(staging) == set(), "a refusal writes nothing"
            self.outcomes[refusal.code] += 1
        else:
            written = {str(path.relative_to(found.evals)): path.read_bytes() for path in files_under(staging)}
            assert written == example_files(), "what is written is exactly the suite"
            self.outcomes["materialized"] += 1
        outside = files_under(self.root) - files_under(self.root / "staging") - files_under(self.cache)
        assert outside == before, "nothing is written outside the staging directories and the cache"
        for entry in self.cache.iterdir() if self.cache.exists() else ():
            assert not entry.name.startswith("."), "no partial cache entry is left"
            assert {path.relative_to(entry / "evals") for path in files_under(entry / "evals")} == {
                Path(name) for name in example_files()
            }


def test_spoiled_releases_materialize_exactly_or_are_refused_typed(tmp_path: Path) -> None:
    with asyncio.Runner() as runner:
        server = BlobServer(tmp_path / "blobs", [AUTHOR.public_key().to_hex()])
        runner.run(server.start())
        store = BlobStore([server.url], attempt_seconds=10, fetch_seconds=20)
        fuzz = Fuzz(tmp_path, server, store, runner)
        try:

            @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
            @given(spoiling=spoilings())
            def one(spoiling: Spoiling) -> None:
                fuzz.one(spoiling)

            one()
        finally:
            runner.run(store.close())
            runner.run(server.close())
    assert fuzz.outcomes["materialized"] > 5, fuzz.outcomes
    assert fuzz.outcomes["not_admitted"] > 50, fuzz.outcomes
    assert fuzz.outcomes["identity_mismatch"] + fuzz.outcomes["content_unavailable"] > 5, fuzz.outcomes
