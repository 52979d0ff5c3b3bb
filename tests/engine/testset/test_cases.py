"""Test sets: good sets load; each rule of the case format refuses a bad set naming the file and the key."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.grade.spec import ArmRule, FocusKind, OperationUsedGrader, RegexGrader
from eval_runner.engine.testset.cases import (
    CaseFile,
    CaseFiles,
    CaseKind,
    Operation,
    case_dirs,
    load_suite,
    parse_case,
)
from eval_runner.engine.testset.frontmatter import TestSetError, split

V = 'v = "openagents.eval-case.v1"\n'
REGEX = '+++\ntype = "regex"\n+++\n\nhello\n'


def write(root: Path, files: Mapping[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def case(front: str = "", body: str = "Say hello.\n", graders: dict[str, str] | None = None) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {"c/prompt.md": f"+++\n{V}{front}+++\n\n{body}"}
    for name, text in (graders if graders is not None else {"g": REGEX}).items():
        files[f"c/graders/{name}.md"] = text
    return files


def refused(tmp_path: Path, files: dict[str, str | bytes]) -> TestSetError:
    write(tmp_path, files)
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path)
    return caught.value


# --- good sets ----------------------------------------------------------------------------------

EXAMPLE: dict[str, str | bytes] = {
    "where-config/prompt.md": (
        '+++\nv = "openagents.eval-case.v1"\n'
        'description = "Find where a Python service keeps its production settings."\n'
        'kind = "should-fire"\ntags = ["layout"]\n\n[run]\nallowed_operations = ["read", "write"]\n+++\n\n'
        "Where does this service keep its production configuration?\n"
    ),
    "where-config/graders/found.md": '+++\ntype = "regex"\ntarget = "trajectory"\n+++\n\nsettings/production\\.toml\n',
    "where-config/graders/mapped.md": '+++\ntype = "operation_used"\noperation = "repo_map"\n+++\n',
    "where-config/fixtures/app/settings/production.toml": "debug = false\n",
    "where-config/fixtures/app/main.py": "print('hi')\n",
    "small-talk/prompt.md": (
        '+++\nv = "openagents.eval-case.v1"\n'
        'description = "A greeting, where a project map has no place."\nkind = "should-not-fire"\n\n'
        '[run]\nallowed_operations = ["read", "write"]\n+++\n\nSay hello to a new contributor in one line.\n'
    ),
    "small-talk/graders/reply.md": (
        '+++\ntype = "regex"\nflags = "i"\ntarget = "last_message"\n+++\n\n\\b(welcome|hello|hi|glad)\\b\n'
    ),
    "small-talk/graders/untouched.md": (
        '+++\ntype = "operation_used"\noperation = "repo_map"\nmin = 0\nmax = 0\narm = "both"\n+++\n'
    ),
}


def test_the_constructed_example_loads(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, EXAMPLE))
    assert [c.name for c in suite.cases] == ["small-talk", "where-config"]
    talk, where = suite.cases
    assert talk.kind is CaseKind.SHOULD_NOT_FIRE
    assert where.kind is CaseKind.SHOULD_FIRE
    assert where.tags == ("layout",)
    assert where.runs == 3
    assert where.run.deadline_seconds == 300
    assert where.run.allowed_operations == (Operation.READ, Operation.WRITE)
    assert where.prompt == "Where does this service keep its production configuration?"
    assert [f.name for f in where.fixtures] == ["app/main.py", "app/settings/production.toml"]
    assert where.fixtures[1].data == b"debug = false\n"
    found, mapped = where.graders
    assert isinstance(found, RegexGrader)
    assert found.target.kind is FocusKind.TRAJECTORY
    assert found.pattern == "settings/production\\.toml"
    assert isinstance(mapped, OperationUsedGrader)
    assert mapped.subject_only({"repo_map"})
    assert not where.subject_only({"repo_map"})
    untouched = talk.graders[1]
    assert isinstance(untouched, OperationUsedGrader)
    assert untouched.arm is ArmRule.BOTH
    assert (untouched.min, untouched.max) == (0, 0)
    assert where.files.prompt == (tmp_path / "where-config/prompt.md").read_bytes()
    assert where.files.case_toml is None
    assert [g.name for g in where.files.graders] == ["found.md", "mapped.md"]
    assert where.warnings() == []
    assert where.dir == tmp_path / "where-config"


def test_defaults_and_case_toml_merge(tmp_path: Path) -> None:
    files = {
        "c/case.toml": (
            f'{V}name = "base-name"\nruns = 5\n[run]\ndeadline_seconds = 60\ndoor = "base"\n'
            '[[graders]]\nname = "first"\ntype = "receipt"\noperation = "x"\n'
        ),
        "c/prompt.md": '+++\nname = "front-name"\n[run]\ndoor = "front"\n+++\n\n  Do it.  \n',
        "c/graders/later.md": REGEX,
    }
    (only,) = load_suite(write(tmp_path, files)).cases
    assert only.name == "front-name"
    assert only.runs == 5
    assert only.run.deadline_seconds == 60
    assert only.run.door == "front"
    assert only.run.allowed_operations == (Operation.READ,)
    assert only.prompt == "Do it."
    assert [g.name for g in only.graders] == ["first", "later"]
    assert only.graders[0].origin == "c/case.toml#graders[0]"


def test_run_prompt_is_used_only_when_the_body_is_empty(tmp_path: Path) -> None:
    (only,) = load_suite(write(tmp_path, case('[run]\nprompt = " From the table. "\n', body="\n"))).cases
    assert only.prompt == "From the table."


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    files = case()
    files["c/prompt.md"] = "\ufeff" + str(files["c/prompt.md"])
    (only,) = load_suite(write(tmp_path, files)).cases
    assert only.prompt == "Say hello."


def test_read_is_always_added_and_order_is_canonical(tmp_path: Path) -> None:
    files = case('[run]\nallowed_operations = ["network", "write"]\n')
    (only,) = load_suite(write(tmp_path, files)).cases
    assert only.run.allowed_operations == (Operation.READ, Operation.WRITE, Operation.NETWORK)


def test_an_env_key_outside_oa_eval_loads_and_is_rejected_at_run(tmp_path: Path) -> None:
    (only,) = load_suite(write(tmp_path, case('[run.env]\nOA_EVAL_FAKE = "sleep"\nPATH = "/x"\n'))).cases
    assert only.run.env == (("OA_EVAL_FAKE", "sleep"), ("PATH", "/x"))
    assert only.env_rejection() == "PATH"


def test_allowed_env_keys_pass(tmp_path: Path) -> None:
    (only,) = load_suite(write(tmp_path, case('[run.env]\nOA_EVAL_A_1 = "x"\nOA_EVAL_ = "y"\n'))).cases
    assert only.env_rejection() is None
    assert dict(only.run.env) == {"OA_EVAL_A_1": "x", "OA_EVAL_": "y"}


def test_discovery_skips_and_orders(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {}
    for where in ("b", "a/x", "a/y", "results/r", "node_modules/n", ".git/g", ".openagents/o"):
        files.update({f"{where}/{k[2:]}": v for k, v in case().items()})
    files["a/x/nested/prompt.md"] = "not a case: inside one"
    files["prompt.md"] = "the root is never a case"
    write(tmp_path, files)
    assert case_dirs(tmp_path) == ["a/x", "a/y", "b"]
    os.symlink(tmp_path / "b", tmp_path / "linked")
    assert case_dirs(tmp_path) == ["a/x", "a/y", "b"]


# --- one refusal per rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("front", "file", "key", "words"),
    [
        ("color = 1\n", "c/prompt.md", "color", "the allowed keys are v, name, description, tags, kind"),
        ("graders = []\n", "c/prompt.md", "graders", "unknown key"),
        ("[run]\nspeed = 1\n", "c/prompt.md", "run.speed", "prompt, deadline_seconds, door, allowed_operations"),
        ("run = 1\n", "c/prompt.md", "run", "must be a table"),
        ("runs = 0\n", "c/prompt.md", "runs", "from 1 to 10"),
        ("runs = 11\n", "c/prompt.md", "runs", "from 1 to 10"),
        ('runs = "3"\n', "c/prompt.md", "runs", "from 1 to 10"),
        ("runs = true\n", "c/prompt.md", "runs", "from 1 to 10"),
        ("[run]\ndeadline_seconds = 0\n", "c/prompt.md", "run.deadline_seconds", "from 1 to 1800"),
        ("[run]\ndeadline_seconds = 1801\n", "c/prompt.md", "run.deadline_seconds", "from 1 to 1800"),
        ('[run]\nallowed_operations = ["read", "fly"]\n', "c/prompt.md", "run.allowed_operations", "`fly`"),
        ('[run]\nallowed_operations = "read"\n', "c/prompt.md", "run.allowed_operations", "array of strings"),
        ("[run.env]\nOA_EVAL_X = 1\n", "c/prompt.md", "run.env.OA_EVAL_X", "must be a string"),
        ('[run]\nenv = "x"\n', "c/prompt.md", "run.env", "must be a table"),
        ("[run]\ndoor = 1\n", "c/prompt.md", "run.door", "must be a string"),
        ('kind = "sometimes"\n', "c/prompt.md", "kind", "should-fire"),
        ('tags = ["ok", " "]\n', "c/prompt.md", "tags", "non-empty strings"),
        ("description = 3\n", "c/prompt.md", "description", "must be a string"),
        ('name = ".hidden"\n', "c/prompt.md", "name", "case name"),
        ('name = "results"\n', "c/prompt.md", "name", "case name"),
        ('name = "has space"\n', "c/prompt.md", "name", "case name"),
        (f'name = "{"n" * 65}"\n', "c/prompt.md", "name", "1 to 64"),
    ],
)
def test_bad_front_matter_is_refused(tmp_path: Path, front: str, file: str, key: str, words: str) -> None:
    error = refused(tmp_path, case(front))
    assert (error.file, error.key) == (file, key)
    assert words in error.message
    assert file in str(error)


def test_v_is_required_exact_and_newer_says_update(tmp_path: Path) -> None:
    files = case()
    files["c/prompt.md"] = "+++\n+++\nhi\n"
    error = refused(tmp_path / "missing", files)
    assert (error.file, error.key) == ("c/prompt.md", "v")
    files["c/prompt.md"] = '+++\nv = "openagents.eval-case.v0"\n+++\nhi\n'
    assert "must be" in refused(tmp_path / "older", files).message
    files["c/prompt.md"] = '+++\nv = "openagents.eval-case.v2"\n+++\nhi\n'
    error = refused(tmp_path / "newer", files)
    assert error.key == "v"
    assert "update OpenAgents" in error.message


def test_a_case_toml_key_is_named_in_case_toml(tmp_path: Path) -> None:
    files = case()
    files["c/case.toml"] = "runs = 99\n"
    error = refused(tmp_path / "a", files)
    assert (error.file, error.key) == ("c/case.toml", "runs")
    files["c/case.toml"] = "extra = 1\n"
    error = refused(tmp_path / "b", files)
    assert (error.file, error.key) == ("c/case.toml", "extra")
    assert "graders" in error.message
    files["c/case.toml"] = 'graders = "x"\n'
    assert refused(tmp_path / "c", files).key == "graders"
    files["c/case.toml"] = "graders = [1]\n"
    assert refused(tmp_path / "d", files).key == "graders[0]"
    files["c/case.toml"] = '[[graders]]\ntype = "regex"\nname = "r"\n'
    error = refused(tmp_path / "e", files)
    assert (error.file, error.key) == ("c/case.toml", "graders[0].pattern")


@pytest.mark.parametrize("where", ["prompt.md", "graders/g.md", "case.toml"])
def test_a_todo_line_refuses_the_case(tmp_path: Path, where: str) -> None:
    files = case()
    if where == "prompt.md":
        files["c/prompt.md"] = f"+++\n{V}+++\n\nSay hello.\n   TODO: finish\n"
    elif where == "case.toml":
        files["c/case.toml"] = 'description = """\n  TODO write it\n"""\n'
    else:
        files["c/graders/g.md"] = '+++\ntype = "regex"\n+++\n\nhello\nTODO later\n'
    error = refused(tmp_path, files)
    assert error.file == f"c/{where}"
    assert error.line == (2 if where == "case.toml" else 6)
    assert "TODO" in error.message
    write(tmp_path, files)
    assert load_suite(tmp_path, allow_todo=True).cases


def test_duplicate_case_names_are_refused(tmp_path: Path) -> None:
    files = {f"a/{k[2:]}": v for k, v in case('name = "same"\n').items()}
    files.update({f"b/{k[2:]}": v for k, v in case('name = "same"\n').items()})
    error = refused(tmp_path, files)
    assert (error.file, error.key) == ("b/prompt.md", "name")
    assert "a and b" in error.message


def test_duplicate_grader_names_are_refused(tmp_path: Path) -> None:
    files = case(graders={"a": REGEX, "b": '+++\ntype = "regex"\nname = "a"\n+++\nx\n'})
    error = refused(tmp_path / "files", files)
    assert (error.file, error.key) == ("c/graders/b.md", "name")
    files = case(graders={"a": REGEX})
    files["c/case.toml"] = '[[graders]]\nname = "a"\ntype = "receipt"\noperation = "x"\n'
    error = refused(tmp_path / "toml", files)
    assert (error.file, error.key) == ("c/graders/a.md", "name")


def test_at_least_one_grader(tmp_path: Path) -> None:
    error = refused(tmp_path, case(graders={}))
    assert (error.file, error.key) == ("c/prompt.md", "graders")


def test_a_value_in_front_matter_and_body_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, case(graders={"g": '+++\ntype = "judge"\ncriteria = "c"\n+++\nalso c\n'}))
    assert (error.file, error.key) == ("c/graders/g.md", "criteria")
    assert "given twice" in error.message


def test_a_grader_file_needs_front_matter(tmp_path: Path) -> None:
    error = refused(tmp_path, case(graders={"g": "just a body\n"}))
    assert error.file == "c/graders/g.md"
    assert "frontmatter" in error.message


def test_an_unclosed_fence_is_refused(tmp_path: Path) -> None:
    files = case()
    files["c/prompt.md"] = f"+++\n{V}\nhello\n"
    error = refused(tmp_path, files)
    assert error.file == "c/prompt.md"
    assert "never closes" in error.message


def test_a_missing_prompt_and_bad_bytes_are_refused(tmp_path: Path) -> None:
    error = refused(tmp_path / "body", case(body="   \n"))
    assert (error.file, error.key) == ("c/prompt.md", "run.prompt")
    files = case()
    files["c/prompt.md"] = b"+++\n" + V.encode() + b"+++\n\xff\xfe\n"
    assert "not UTF-8" in refused(tmp_path / "utf8", files).message
    files["c/prompt.md"] = f"+++\n{V}v = 2\n+++\nhi\n"
    assert "TOML does not parse" in refused(tmp_path / "toml", files).message


def test_links_are_refused(tmp_path: Path) -> None:
    files = case()
    files["c/fixtures/real.txt"] = "x"
    write(tmp_path / "fixture", files)
    os.symlink("/etc/passwd", tmp_path / "fixture/c/fixtures/link.txt")
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path / "fixture")
    assert caught.value.file == "c/fixtures/link.txt"
    assert "not a link" in caught.value.message

    write(tmp_path / "dir", case())
    os.symlink("/etc", tmp_path / "dir/c/fixtures")
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path / "dir")
    assert caught.value.file == "c/fixtures"

    files = case()
    del files["c/prompt.md"]
    write(tmp_path / "prompt", files)
    (tmp_path / "elsewhere.md").write_text(f"+++\n{V}+++\nhi\n")
    os.symlink(tmp_path / "elsewhere.md", tmp_path / "prompt/c/prompt.md")
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path / "prompt")
    assert caught.value.file == "c/prompt.md"
    assert "regular file" in caught.value.message


def test_size_and_count_limits(tmp_path: Path) -> None:
    files = case(body="x" * (1 << 20))
    error = refused(tmp_path / "big", files)
    assert error.file == "c/prompt.md"
    assert "at most 1048576 bytes" in error.message

    many = {f"g{index:02d}": REGEX.replace("type", f'name = "g{index:02d}"\ntype') for index in range(65)}
    error = refused(tmp_path / "graders", case(graders=many))
    assert error.file == "c/graders"
    assert "at most 64" in error.message

    files = case()
    files.update({f"c/fixtures/f{index:03d}.txt": "x" for index in range(257)})
    error = refused(tmp_path / "fixtures", files)
    assert error.file == "c/fixtures"
    assert "at most 256" in error.message

    files = case()
    files["c/fixtures/big.bin"] = b"\0" * ((1 << 20) + 1)
    assert refused(tmp_path / "bigfixture", files).file == "c/fixtures/big.bin"


def test_an_empty_or_missing_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path / "empty")
    assert "holds no case" in caught.value.message
    with pytest.raises(TestSetError):
        load_suite(tmp_path / "missing")


# --- the front-matter parser on arbitrary text ---------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_split_raises_only_test_set_errors(text: str) -> None:
    try:
        front, body = split(text, "f.md")
    except TestSetError as caught:
        assert caught.file == "f.md"  # noqa: PT017 - hypothesis drives this, not pytest.raises
        return
    assert text.endswith(body)
    assert front is None or front in text


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=400),
        st.text(max_size=300).map(lambda t: ("+++\n" + t).encode("utf-8", "surrogatepass")),
        st.text(alphabet="+=\n[]\"' abcdefgrunsvkidt.0123456789", max_size=200).map(
            lambda t: f"+++\n{V}{t}\n+++\nbody".encode()
        ),
    ),
    st.text(alphabet="+=\n[]\"' abcdefgrunsvkidtypex.0123456789", max_size=200),
)
def test_a_case_parser_fed_anything_raises_only_test_set_errors(prompt: bytes, grader: str) -> None:
    files = CaseFiles(
        prompt=prompt,
        case_toml=None,
        graders=(CaseFile("g.md", f"+++\n{grader}\n+++\n".encode("utf-8", "surrogatepass")),),
        fixtures=(),
    )
    try:
        parse_case("c", "c", Path("c"), files)
    except TestSetError as caught:
        assert caught.file.startswith("c/")  # noqa: PT017 - any other exception fails the test


def test_a_grader_file_stem_outside_the_grammar_is_refused(tmp_path: Path) -> None:
    files = case(graders={"my grader": '+++\ntype = "regex"\nname = "ok"\n+++\nx\n'})
    error = refused(tmp_path, files)
    assert error.file == "c/graders/my grader.md"
    assert "named like a case" in error.message


def test_a_fifo_in_place_of_a_case_file_is_refused_without_blocking(tmp_path: Path) -> None:
    files = case()
    del files["c/graders/g.md"]
    write(tmp_path, files)
    (tmp_path / "c/graders").mkdir()
    os.mkfifo(tmp_path / "c/graders/g.md")
    with pytest.raises(TestSetError) as caught:
        load_suite(tmp_path)
    assert caught.value.file == "c/graders/g.md"
    assert "regular file" in caught.value.message
