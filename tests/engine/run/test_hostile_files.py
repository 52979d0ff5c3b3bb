"""What a hostile agent leaves in its workspace, run through the engine in the real sandbox (issue 7, items 3,
4 and 9 of an outside test that ran an adversarial agent through `eval run`).

* A created name that is not UTF-8 no longer sinks the suite: it is kept exactly (shown, plus its bytes in
  base64, in created.json) and the run is graded like any other.
* A directory chain deeper than PATH_MAX and the stack, and a directory made mode 000, are collected and
  removed: the suite reports every run and no run directory stays behind. The remover and walker are also
  checked alone, as a runner that is not root, with few descriptors.
* A link satisfies `file_exists` only when it names something inside the workspace.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import pretty, read
from eval_runner.engine.report.inputs import Attempt
from eval_runner.engine.report.results_dir import listed_path
from eval_runner.engine.run.collect import created_files, exact_path, path_bytes, remove_tree, shown_path
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.suite_run import DoorSettings, SuiteAuthor, SuitePlan, execute, plan_attempts, run_suite
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Subject
from eval_runner.engine.verdict.scores import Arm
from eval_runner.stand_ins.door import StandInDoor
from tests.support.sandboxed_runs import AGENT, fresh_temp_root, host_confinement, make_temp_root
from tests.support.stand_in_sandboxed_agent import ODD_LINK, ODD_NAME, ODD_TARGET

DOOR_KEY = "hostile-files-door-key-never-kept-91c2"
KEY = "0" * 64
#: The outside test's chain: 3000 levels of two-letter names, 9000 bytes of path, past PATH_MAX (4096).
DEPTH = 3000
DEEP = "dd/" * DEPTH + "deep.txt"
NOBODY = 65534


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def write_case(evals: Path, name: str, act: str, graders: dict[str, str], env: dict[str, str] | None = None) -> None:
    case = evals / name
    (case / "graders").mkdir(parents=True)
    table = "".join(f'{key} = "{value}"\n' for key, value in sorted({"OA_EVAL_ACT": act, **(env or {})}.items()))
    (case / "prompt.md").write_text(
        '+++\nv = "openagents.eval-case.v1"\nkind = "should-fire"\n\n'
        '[run]\nallowed_operations = ["read", "write"]\ndeadline_seconds = 60\n\n'
        f"[run.env]\n{table}+++\n\nMake the files.\n"
    )
    for grader, front in graders.items():
        (case / "graders" / f"{grader}.md").write_text(f"+++\n{front}\n+++\n")


def file_exists(glob: str) -> str:
    return f'type = "file_exists"\npath = "{glob}"'


def plan_for(evals: Path, door_url: str, temp_root: Path, results: Path) -> SuitePlan:
    subject = Subject(
        slug="nothing",
        definition=DefinitionRef(
            id=f"{KEY}:nothing/nothing",
            artifact=ArtifactRef.of_bytes(b"nothing", "application/json", "openagents.ext-package.v1"),
        ),
        package_lock={"v": 1, "slug": "nothing"},
        programs=(),
        skills=(),
    )
    return SuitePlan(
        suite=load_suite(evals),
        subject=subject,
        agent=AGENT,
        door=DoorSettings(door_url, DOOR_KEY, "stand-in"),
        author=SuiteAuthor(KEY, "hostile", "suite", KEY),
        temp_root=temp_root,
        results_base=results,
        runs=1,
        concurrency=2,
        subject_definition=b"nothing",
        hosted=False,
    )


def grades(attempt: Attempt) -> dict[str, Any]:
    document = read(attempt.grades)
    assert isinstance(document, dict)
    return document


def passed(attempt: Attempt) -> dict[str, bool]:
    return {result["name"]: result["passed"] for result in grades(attempt)["graders"]}


# --- 3 and 4: the suite reports every run, whatever names and depths the agent made ---------------------


async def test_odd_names_and_a_deep_chain_leave_every_run_graded_and_no_directory_behind(
    confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    evals = tmp_path / "evals"
    write_case(evals, "odd-name", "non-utf8-name", {"answer": file_exists("answer.md"), "odd": file_exists("odd-*")})
    write_case(
        evals,
        "deep-chain",
        "deep-chain",
        {"deep": file_exists("**/deep.txt"), "locked": file_exists("locked/inner/kept.txt")},
    )
    async with StandInDoor(DOOR_KEY) as door:
        outcome = await run_suite(plan_for(evals, door.url, temp_root, tmp_path / "results"), confinement=confinement)

    assert os.listdir(temp_root) == [], "a run directory was left behind"
    assert (outcome.results_dir / "report.json").read_bytes() == outcome.built.report_bytes
    attempts = {(attempt.case, attempt.arm): attempt for attempt in outcome.built.attempts}
    assert sorted(attempts) == sorted((case, arm) for case in ("deep-chain", "odd-name") for arm in Arm)

    for arm in Arm:
        odd = attempts["odd-name", arm]
        assert (odd.end.value, passed(odd)) == ("completed", {"answer": True, "odd": True})
        assert grades(odd)["created_files"] == ["answer.md", "link-\\xe9", "odd-\\xff\\xfe name.txt"]
    kept = outcome.results_dir / "runs/odd-name/subject-1"
    listed = read((kept / "created.json").read_bytes())
    assert listed == [
        "answer.md",
        {"path": "link-\\xe9", "path_base64": exact_path(os.fsdecode(ODD_LINK))},
        {"path": "odd-\\xff\\xfe name.txt", "path_base64": exact_path(os.fsdecode(ODD_NAME))},
    ]
    assert [path_bytes(entry["path"], entry["path_base64"]) for entry in listed[1:]] == [ODD_LINK, ODD_NAME]
    assert sorted(os.listdir(kept / "files")) == ["answer.md"]  # a name that is not UTF-8 is listed, not copied

    for arm in Arm:
        # A sandbox that bounds the depth of a run's directories stops the agent part-way down
        # (`errored(disk_limit)`); either way the run is graded, collected and removed.
        deep = attempts["deep-chain", arm]
        if deep.end.value == "errored":
            assert deep.reason == "disk_limit"
            assert passed(deep) == {"deep": False, "locked": False}
            continue
        assert (deep.end.value, passed(deep)) == ("completed", {"deep": True, "locked": True})
        run = outcome.results_dir / f"runs/deep-chain/{arm.value}-1"
        assert read((run / "created.json").read_bytes()) == [DEEP, "locked/inner/kept.txt"]
        assert sorted(os.listdir(run / "files")) == ["locked"]  # the deep path is too long to copy


# --- 9: a link satisfies file_exists only inside the workspace -------------------------------------------


@pytest.mark.parametrize(
    ("link", "counts"),
    [
        ("/etc/passwd", False),  # what the outside test did: it passed in both arms
        ("../../x", False),  # climbs out of the workspace
        ("via/passwd", False),  # inside by name, but through `via -> /etc`
        ("", True),  # no link: a regular file
        ("inside.md", True),  # a link to a file the run made inside
    ],
)
async def test_file_exists_counts_a_link_only_when_it_stays_inside_the_workspace(
    link: str, counts: bool, confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    evals = tmp_path / "evals"
    write_case(evals, "answer", "link-answer", {"answer": file_exists("answer.md")}, env={"OA_EVAL_LINK": link})
    async with StandInDoor(DOOR_KEY) as door:
        plan = plan_for(evals, door.url, temp_root, tmp_path / "results")
        attempts = await execute(plan, plan_attempts(plan.suite, plan.subject, 1), confinement=confinement)
    assert [(a.arm, a.end.value) for a in attempts] == [(Arm.SUBJECT, "completed"), (Arm.BASELINE, "completed")]
    for attempt in attempts:
        (result,) = grades(attempt)["graders"]
        explanation = "created answer.md" if counts else "no created file matches answer.md"
        assert (result["passed"], result["explanation"]) == (counts, explanation)
        assert "answer.md" in grades(attempt)["created_files"]  # listed either way, as the reference lists it
    assert os.listdir(temp_root) == []


def test_a_link_is_inside_only_when_its_target_resolves_to_something_the_walk_saw_inside(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "real.md").write_text("real")
    os.mkfifo(tmp_path / "fifo")
    links = {
        "file": "real.md",
        "dir": "sub",
        "link-to-link": "file",
        "sub/up": "../real.md",
        "sub/dots": "./../sub/../real.md",
        "absolute": "/etc/passwd",
        "escape": "../real.md",
        "escape-from-sub": "sub/../../real.md",
        "via": "/etc",
        "through": "via/passwd",
        "dangling": "missing.md",
        "loop-a": "loop-b",
        "loop-b": "loop-a",
        "pipe": "fifo",
        "not-a-directory": "real.md/",
        "root": ".",
    }
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    created, complete = created_files(tmp_path, {}, [])
    inside = {entry.path for entry in created if entry.kind == "symlink" and entry.inside}
    assert inside == {"dir", "file", "link-to-link", "sub/dots", "sub/up"}
    assert {entry.path for entry in created if entry.present} == inside | {"real.md"}
    assert complete


# --- 4 alone: the walker and the remover, as a runner that is not root -----------------------------------


def unprivileged(base: Path, work: Callable[[Path], Any]) -> Any:
    """`work(base)`'s JSON answer from a child process that holds at most 128 descriptors and, when we are
    root, runs as uid 65534 (owning `base`), so permissions bind as they do for a runner that is not root."""
    if os.getuid() == 0:
        os.chown(base, NOBODY, NOBODY)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            answer = {"answer": work(base)}
        except BaseException as error:  # every failure is the answer
            answer = {"raised": repr(error)}
        os.write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    found = json.loads(data)
    assert "raised" not in found, found
    return found["answer"]


@pytest.fixture
def base() -> Iterator[Path]:
    root = make_temp_root()
    yield root
    assert remove_tree(root)


def chain(top: Path, depth: int, leaf: str) -> None:
    """`depth` directories `dd` one in another under `top` and a file at the bottom, made by descriptor."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("dd", dir_fd=fd)
        inner = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    leaf_fd = os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
    os.write(leaf_fd, b"deep")
    os.close(leaf_fd)
    os.close(fd)


def walk_then_remove(base: Path) -> dict[str, Any]:
    tree = base / "tree"
    tree.mkdir()
    outside = base / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    chain(tree, DEPTH, "deep.txt")
    (tree / "link-out").symlink_to(outside)  # never entered, never emptied
    (tree / "locked" / "inner").mkdir(parents=True)
    (tree / "locked" / "inner" / "kept.txt").write_text("kept")
    (tree / "read-only").mkdir()
    (tree / "read-only" / "stuck.txt").write_text("stuck")
    (tree / "unreadable.txt").write_text("secret-free")
    os.chmod(tree / "unreadable.txt", 0)
    os.chmod(tree / "read-only", 0o500)
    os.chmod(tree / "locked" / "inner", 0)
    os.chmod(tree / "locked", 0)
    created, complete = created_files(tree, {}, [])
    removed = remove_tree(tree)
    return {
        "created": [(entry.path, entry.kind, entry.data and entry.data.decode()) for entry in created],
        "complete": complete,
        "removed": removed,
        "gone": not os.path.lexists(tree),
        "outside": sorted(os.listdir(outside)),
    }


def test_a_chain_past_path_max_and_taken_permissions_are_walked_and_removed(base: Path) -> None:
    found = unprivileged(base, walk_then_remove)
    assert found["created"] == [
        [DEEP, "file", "deep"],
        ["link-out", "symlink", None],
        ["locked/inner/kept.txt", "file", "kept"],
        ["read-only/stuck.txt", "file", "stuck"],
        ["unreadable.txt", "file", "secret-free"],
    ]
    assert found["complete"]
    assert (found["removed"], found["gone"]) == (True, True)
    assert found["outside"] == ["keep.txt"]


def test_removal_that_cannot_finish_says_so_and_removes_the_rest(base: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs a second user to own what the runner may not remove")
    tree = base / "tree"
    (tree / "theirs").mkdir(parents=True)
    (tree / "theirs" / "file").write_text("root's")
    (tree / "mine").mkdir()
    os.chown(tree, NOBODY, NOBODY)
    os.chown(tree / "mine", NOBODY, NOBODY)

    def remove(base: Path) -> dict[str, Any]:
        return {"removed": remove_tree(base / "tree"), "left": sorted(os.listdir(base / "tree"))}

    assert unprivileged(base, remove) == {"removed": False, "left": ["theirs"]}


def test_a_walk_stopped_by_a_directory_it_cannot_read_says_so(base: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs a second user to own a directory the runner may not open")
    tree = base / "tree"
    (tree / "theirs").mkdir(parents=True)
    (tree / "theirs" / "hidden.txt").write_text("x")
    os.chmod(tree / "theirs", 0o700)
    (tree / "mine.txt").write_text("x")
    os.chown(tree, NOBODY, NOBODY)
    os.chown(tree / "mine.txt", NOBODY, NOBODY)

    def walk(base: Path) -> Any:
        created, complete = created_files(base / "tree", {}, [])
        return [[entry.path for entry in created], complete]

    assert unprivileged(base, walk) == [["mine.txt"], False]


def test_removing_what_is_not_there_or_is_a_link_never_follows_it(tmp_path: Path) -> None:
    assert remove_tree(tmp_path / "absent")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "kept").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert remove_tree(tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link")
    assert (tmp_path / "target" / "kept").read_text() == "kept"


# --- 3 alone: the name encoding ---------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.binary(min_size=1, max_size=80))
def test_any_name_is_listed_in_a_form_json_holds_and_decodes_back_exactly(raw: bytes) -> None:
    path = os.fsdecode(raw)  # how os.scandir and os.listdir give a name
    entry = read(pretty([listed_path(path)]))[0]  # pretty raises on anything JSON cannot hold
    if isinstance(entry, str):
        assert entry == raw.decode("utf-8") == shown_path(path)
        assert exact_path(path) is None
    else:
        assert entry["path"] == shown_path(path) == raw.decode("utf-8", "backslashreplace")
        assert path_bytes(entry["path"], entry["path_base64"]) == raw


def test_a_name_that_is_not_utf8_shows_its_bytes_and_keeps_them() -> None:
    for raw in (ODD_NAME, ODD_LINK, ODD_TARGET, b"\xed\xb3\xbf", b"caf\xc3\xa9 ok"):
        path = os.fsdecode(raw)
        assert path_bytes(shown_path(path), exact_path(path)) == raw
    assert shown_path(os.fsdecode(b"caf\xc3\xa9")) == "café"
    assert shown_path(os.fsdecode(ODD_NAME)) == "odd-\\xff\\xfe name.txt"
