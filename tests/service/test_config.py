"""Configuration from the environment (runner.md §2): every default, every message, the check order, the
decision door's order and keys, and no secret in a printed configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval_runner.service.config import Config, ConfigError, admission_closed, key_file_location, quoted
from eval_runner.service.settings import (
    BlossomBlobs,
    Bucket,
    ChatDoor,
    DecisionPin,
    EmbeddedBlobs,
    EmbeddedRelay,
    ExternalRelay,
    JevDoorKind,
    JevDoorPin,
    Limits,
    Secret,
)
from tests.support.plain_words import assert_plain, rust_idioms

DOOR_KEY = "door-key-7f3a9"
BASE = {
    "EVAL_RUNNER_CATALOG": "/ext/a:/ext/b",
    "EVAL_RUNNER_CODER": "/opt/coder",
    "CODER_DOOR_KEY": DOOR_KEY,
    "HOME": "/home/trainer",
    "TMPDIR": "/var/tmp",
}


def env(**changes: str | None) -> dict[str, str]:
    out = dict(BASE)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def change(name: str, value: str | None) -> dict[str, str | None]:
    return {name: value}


def refused(environ: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as caught:
        Config.from_env(environ)
    return str(caught.value)


def test_every_default() -> None:
    config = Config.from_env(BASE)
    assert config.relay == EmbeddedRelay("127.0.0.1", 7447)
    assert config.relay_url == "ws://127.0.0.1:7447"
    assert config.catalog == (Path("/ext/a"), Path("/ext/b"))
    assert config.coder == Path("/opt/coder")
    assert config.questions is None
    assert config.door == ChatDoor("https://ai-gateway.vercel.sh", "google/gemini-3.8-flash", Secret(DOOR_KEY))
    assert config.door.label() == "default/google/gemini-3.8-flash"
    assert config.decision is None
    assert config.limits == Limits(None, None, 2, 4)
    assert config.limits.line() == "no usage limit; 2 suites and 4 runs at once"
    assert config.blobs == EmbeddedBlobs("127.0.0.1", 7448)
    assert config.bucket is None
    assert config.state == Path("/home/trainer/.openagents/eval-runner")
    assert config.key_file == Path("/home/trainer/.openagents/eval-runner/runner-key")
    assert config.key_may_be_generated is True
    assert config.temp_root == Path("/var/tmp")
    assert config.defaults_root is None
    assert config.defaults_documents == Path("/home/trainer/.openagents/coder-defaults/documents")
    assert (config.probe_ms, config.renew_ms) == (30_000, 2_700_000)
    assert config.gates_dir is None
    assert config.notify_socket is None
    assert config.hostname is None
    assert config.usage_dir == Path("/home/trainer/.openagents/eval-runner/usage")
    assert config.quota_file == Path("/home/trainer/.openagents/eval-runner/quota.json")
    assert config.closed_flag == Path("/home/trainer/.openagents/eval-runner/closed")


def test_without_home_or_tmpdir_the_defaults_are_relative_and_tmp() -> None:
    config = Config.from_env(env(HOME=None, TMPDIR=None, EVAL_RUNNER_RELAY="wss://relay.example"))
    assert config.state == Path(".openagents/eval-runner")
    assert config.key_file == Path(".openagents/nostr/eval-runner-key")
    assert config.temp_root == Path("/tmp")


SETTINGS: list[tuple[str, str, str, Any]] = [
    ("EVAL_RUNNER_RELAY", "wss://relay.example/", "relay", ExternalRelay("wss://relay.example/")),
    ("EVAL_RUNNER_RELAY", "ws://127.0.0.1:9000", "relay_url", "ws://127.0.0.1:9000"),
    ("EVAL_RUNNER_LISTEN", "0.0.0.0:8000", "relay", EmbeddedRelay("0.0.0.0", 8000)),
    ("EVAL_RUNNER_LISTEN", "[::1]:7447", "relay_url", "ws://[::1]:7447"),
    ("EVAL_RUNNER_LISTEN", "localhost:0", "relay", EmbeddedRelay("localhost", 0)),
    ("EVAL_RUNNER_CATALOG", "::/x::/y:", "catalog", (Path("/x"), Path("/y"))),
    ("EVAL_RUNNER_QUESTIONS", "/q", "questions", Path("/q")),
    (
        "CODER_DOOR_URL",
        "https://door.example",
        "door",
        ChatDoor("https://door.example", "google/gemini-3.8-flash", Secret(DOOR_KEY)),
    ),
    ("CODER_MODEL", "fake/model", "door", ChatDoor("https://ai-gateway.vercel.sh", "fake/model", Secret(DOOR_KEY))),
    ("EVAL_RUNNER_RUNS_PER_DAY", "3", "limits", Limits(3, None, 2, 4)),
    ("EVAL_RUNNER_TURNS_PER_DAY", "500", "limits", Limits(None, 500, 2, 4)),
    ("EVAL_RUNNER_JOBS", "5", "limits", Limits(None, None, 5, 4)),
    ("EVAL_RUNNER_JOBS", "+007", "limits", Limits(None, None, 7, 4)),
    ("EVAL_RUNNER_CONCURRENCY", "8", "limits", Limits(None, None, 2, 8)),
    ("EVAL_RUNNER_CONCURRENCY", "1", "limits", Limits(None, None, 2, 1)),
    ("EVAL_RUNNER_BLOSSOM", "https://blobs.example/", "blobs", BlossomBlobs("https://blobs.example")),
    ("EVAL_RUNNER_BLOSSOM_LISTEN", "0.0.0.0:9000", "blobs", EmbeddedBlobs("0.0.0.0", 9000)),
    ("EVAL_RUNNER_LISTEN", "127.0.0.1:0", "blobs", EmbeddedBlobs("127.0.0.1", 0)),
    ("EVAL_RUNNER_RELAY", "wss://relay.example/ws", "blobs", BlossomBlobs("https://relay.example")),
    ("EVAL_RUNNER_STATE", "/srv/state", "state", Path("/srv/state")),
    ("EVAL_RUNNER_STATE", "/srv/state", "key_file", Path("/srv/state/runner-key")),
    ("EVAL_RUNNER_KEY_FILE", "/keys/k", "key_file", Path("/keys/k")),
    ("EVAL_RUNNER_KEY_FILE", "/keys/k", "key_may_be_generated", False),
    ("EVAL_RUNNER_TMP", "/scratch", "temp_root", Path("/scratch")),
    ("EVAL_RUNNER_DEFAULTS_ROOT", "AB" * 32, "defaults_root", "ab" * 32),
    ("EVAL_RUNNER_DEFAULTS_DOCS", "/docs", "defaults_documents", Path("/docs")),
    ("EVAL_RUNNER_PROBE_MS", "300", "probe_ms", 300),
    ("EVAL_RUNNER_RENEW_MS", "400", "renew_ms", 400),
    ("GYM_GATES_DIR", "/gates", "gates_dir", Path("/gates")),
    ("NOTIFY_SOCKET", "@/org/systemd/notify", "notify_socket", "@/org/systemd/notify"),
    ("HOSTNAME", "coderos-4080", "hostname", "coderos-4080"),
]


@pytest.mark.parametrize(("name", "value", "attribute", "expected"), SETTINGS)
def test_each_variable_is_read_trimmed(name: str, value: str, attribute: str, expected: object) -> None:
    assert getattr(Config.from_env(env(**{name: value})), attribute) == expected
    assert getattr(Config.from_env(env(**{name: f" \t{value}\u3000\n"})), attribute) == expected


def test_an_empty_value_is_unset() -> None:
    blank = Config.from_env(env(EVAL_RUNNER_JOBS="  ", EVAL_RUNNER_RUNS_PER_DAY="", EVAL_RUNNER_RELAY=" "))
    assert blank.limits == Limits()
    assert isinstance(blank.relay, EmbeddedRelay)
    gateway = Config.from_env(env(CODER_DOOR_KEY=" ", CODER_AI_GATEWAY_KEY="gateway-key"))
    assert gateway.door.key.expose() == "gateway-key"


def test_an_external_relay_reads_the_home_key_and_never_generates_it() -> None:
    config = Config.from_env(env(EVAL_RUNNER_RELAY="wss://relay.openagents.com"))
    assert config.relay == ExternalRelay("wss://relay.openagents.com")
    assert config.key_file == Path("/home/trainer/.openagents/nostr/eval-runner-key")
    assert config.key_may_be_generated is False
    assert key_file_location(env(EVAL_RUNNER_RELAY="wss://r.example")) == (config.key_file, False)
    assert key_file_location(env(EVAL_RUNNER_STATE="/s")) == (Path("/s/runner-key"), True)


MESSAGES: list[tuple[dict[str, str | None], str]] = [
    (
        {"EVAL_RUNNER_RELAY": "http://relay.example"},
        "EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not 'http://relay.example'",
    ),
    ({"EVAL_RUNNER_RELAY": "wss://"}, "EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not 'wss://'"),
    ({"EVAL_RUNNER_RELAY": "ws://h:70000"}, "EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not 'ws://h:70000'"),
    ({"EVAL_RUNNER_LISTEN": "7447"}, "EVAL_RUNNER_LISTEN must be HOST:PORT, not '7447'"),
    ({"EVAL_RUNNER_LISTEN": "localhost:70000"}, "EVAL_RUNNER_LISTEN must be HOST:PORT, not 'localhost:70000'"),
    ({"EVAL_RUNNER_LISTEN": "::1:7447"}, "EVAL_RUNNER_LISTEN must be HOST:PORT, not '::1:7447'"),
    ({"EVAL_RUNNER_LISTEN": "[nope]:7447"}, "EVAL_RUNNER_LISTEN must be HOST:PORT, not '[nope]:7447'"),
    ({"EVAL_RUNNER_CATALOG": None}, "EVAL_RUNNER_CATALOG names no extension directory"),
    ({"EVAL_RUNNER_CATALOG": ":::"}, "EVAL_RUNNER_CATALOG names no extension directory"),
    ({"EVAL_RUNNER_CODER": None}, "EVAL_RUNNER_CODER is not set"),
    ({"CODER_DOOR_KEY": None}, "no door key: set CODER_DOOR_KEY or CODER_AI_GATEWAY_KEY"),
    *[
        (
            change(name, text),
            f"{name} is an emergency brake: leave it unset for no limit, or set a positive number, not '{text}'",
        )
        for name in ("EVAL_RUNNER_RUNS_PER_DAY", "EVAL_RUNNER_TURNS_PER_DAY")
        for text in ("0", "three", "-1", "1.5", "1_000", "+")
    ],
    (
        {"EVAL_RUNNER_RUNS_PER_DAY": "4294967296"},
        "EVAL_RUNNER_RUNS_PER_DAY is an emergency brake: leave it unset for no limit, or set a positive number, "
        "not '4294967296'",
    ),
    ({"EVAL_RUNNER_JOBS": "two"}, "EVAL_RUNNER_JOBS must be a number, not 'two'"),
    ({"EVAL_RUNNER_JOBS": "-1"}, "EVAL_RUNNER_JOBS must be a number, not '-1'"),
    ({"EVAL_RUNNER_JOBS": "0"}, "EVAL_RUNNER_JOBS must be at least 1"),
    ({"EVAL_RUNNER_JOBS": 'a"b\tc\\'}, "EVAL_RUNNER_JOBS must be a number, not 'a\"b\\tc\\\\'"),
    ({"EVAL_RUNNER_CONCURRENCY": "four"}, "EVAL_RUNNER_CONCURRENCY must be a number, not 'four'"),
    ({"EVAL_RUNNER_CONCURRENCY": "0"}, "EVAL_RUNNER_CONCURRENCY must be from 1 to 8"),
    ({"EVAL_RUNNER_CONCURRENCY": "9"}, "EVAL_RUNNER_CONCURRENCY must be from 1 to 8"),
    ({"EVAL_RUNNER_BLOSSOM": "ftp://b"}, "EVAL_RUNNER_BLOSSOM must be an http:// or https:// URL, not 'ftp://b'"),
    ({"EVAL_RUNNER_BLOSSOM_AUTH": "basic"}, "EVAL_RUNNER_BLOSSOM_AUTH is nip98 or bud02, not 'basic'"),
    ({"EVAL_RUNNER_BLOSSOM_LISTEN": "7448"}, "EVAL_RUNNER_BLOSSOM_LISTEN must be HOST:PORT, not '7448'"),
    (
        {"EVAL_RUNNER_BLOSSOM": "https://b", "EVAL_RUNNER_BLOSSOM_LISTEN": "127.0.0.1:7448"},
        "EVAL_RUNNER_BLOSSOM and EVAL_RUNNER_BLOSSOM_LISTEN: a Blossom server elsewhere, or one here",
    ),
    ({"EVAL_RUNNER_BUCKET": "gs://b"}, "EVAL_RUNNER_BUCKET and EVAL_RUNNER_GCLOUD_CONFIG go together"),
    ({"EVAL_RUNNER_GCLOUD_CONFIG": "/g"}, "EVAL_RUNNER_BUCKET and EVAL_RUNNER_GCLOUD_CONFIG go together"),
    (
        {"EVAL_RUNNER_BUCKET": "gs://b", "EVAL_RUNNER_GCLOUD_CONFIG": "/g"},
        "EVAL_RUNNER_BUCKET needs EVAL_RUNNER_BLOSSOM, its public read base",
    ),
    (
        {"EVAL_RUNNER_BUCKET": "s3://b", "EVAL_RUNNER_GCLOUD_CONFIG": "/g", "EVAL_RUNNER_BLOSSOM": "https://b"},
        "s3://b is not a gs:// bucket",
    ),
    ({"EVAL_RUNNER_DEFAULTS_ROOT": "abc"}, "EVAL_RUNNER_DEFAULTS_ROOT must be a 64-hex public key"),
    ({"EVAL_RUNNER_DEFAULTS_ROOT": "g" * 64}, "EVAL_RUNNER_DEFAULTS_ROOT must be a 64-hex public key"),
    ({"EVAL_RUNNER_PROBE_MS": "0"}, "EVAL_RUNNER_PROBE_MS is a positive number of milliseconds, not '0'"),
    ({"EVAL_RUNNER_PROBE_MS": "30s"}, "EVAL_RUNNER_PROBE_MS is a positive number of milliseconds, not '30s'"),
    ({"EVAL_RUNNER_RENEW_MS": "soon"}, "EVAL_RUNNER_RENEW_MS is a positive number of milliseconds, not 'soon'"),
]


@pytest.mark.parametrize(("changes", "message"), MESSAGES)
def test_each_validation_message(changes: dict[str, str | None], message: str) -> None:
    assert refused(env(**changes)) == message


def test_a_bucket_with_its_configuration_and_base() -> None:
    config = Config.from_env(
        env(EVAL_RUNNER_BUCKET="gs://b/", EVAL_RUNNER_GCLOUD_CONFIG="/g", EVAL_RUNNER_BLOSSOM="https://b")
    )
    assert config.bucket == Bucket("gs://b/", Path("/g"))


#: One failure per variable, in runner.md §2.1's order; with every later one present, the first wins.
ORDER: list[tuple[dict[str, str | None], str]] = [
    ({"EVAL_RUNNER_RELAY": "http://x"}, "EVAL_RUNNER_RELAY must be"),
    ({"EVAL_RUNNER_CATALOG": None}, "EVAL_RUNNER_CATALOG names"),
    ({"EVAL_RUNNER_CODER": None}, "EVAL_RUNNER_CODER is not set"),
    ({"CODER_DOOR_KEY": None}, "no door key"),
    ({"EVAL_RUNNER_RUNS_PER_DAY": "0"}, "EVAL_RUNNER_RUNS_PER_DAY is an emergency brake"),
    ({"EVAL_RUNNER_TURNS_PER_DAY": "0"}, "EVAL_RUNNER_TURNS_PER_DAY is an emergency brake"),
    ({"EVAL_RUNNER_JOBS": "x"}, "EVAL_RUNNER_JOBS must be a number"),
    ({"EVAL_RUNNER_CONCURRENCY": "x"}, "EVAL_RUNNER_CONCURRENCY must be a number"),
    ({"EVAL_RUNNER_BUCKET": "gs://b"}, "EVAL_RUNNER_BUCKET and EVAL_RUNNER_GCLOUD_CONFIG"),
    ({"EVAL_RUNNER_DEFAULTS_ROOT": "x"}, "EVAL_RUNNER_DEFAULTS_ROOT"),
    ({"EVAL_RUNNER_PROBE_MS": "0"}, "EVAL_RUNNER_PROBE_MS"),
    ({"EVAL_RUNNER_RENEW_MS": "0"}, "EVAL_RUNNER_RENEW_MS"),
]


@pytest.mark.parametrize("first", range(len(ORDER)))
def test_the_first_failure_in_order_wins(first: int) -> None:
    changes: dict[str, str | None] = {}
    for later, _ in ORDER[first:]:
        changes.update(later)
    assert refused(env(**changes)).startswith(ORDER[first][1])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"EVAL_RUNNER_CONCURRENCY": "9", "EVAL_RUNNER_JOBS": "0"}, "EVAL_RUNNER_CONCURRENCY must be from 1 to 8"),
        ({"EVAL_RUNNER_JOBS": "0", "EVAL_RUNNER_BUCKET": "gs://b"}, "EVAL_RUNNER_JOBS must be at least 1"),
        ({"EVAL_RUNNER_LISTEN": "bad", "EVAL_RUNNER_CATALOG": None}, "EVAL_RUNNER_LISTEN must be HOST:PORT, not 'bad'"),
        (
            {"EVAL_RUNNER_BUCKET": "s3://b", "EVAL_RUNNER_GCLOUD_CONFIG": "/g"},
            "EVAL_RUNNER_BUCKET needs EVAL_RUNNER_BLOSSOM, its public read base",
        ),
    ],
)
def test_order_within_a_step(changes: dict[str, str | None], message: str) -> None:
    assert refused(env(**changes)) == message


def test_an_external_relay_ignores_the_listen_address() -> None:
    config = Config.from_env(env(EVAL_RUNNER_RELAY="wss://r.example", EVAL_RUNNER_LISTEN="bad"))
    assert config.relay == ExternalRelay("wss://r.example")


def test_a_brake_names_itself_in_the_limits_line() -> None:
    assert Limits(3, None).line() == (
        "emergency brake on: 3 runs per trainer per day, any turns per day; 2 suites and 4 runs at once"
    )
    assert Limits(None, 500, 1, 8).line() == (
        "emergency brake on: any runs per trainer per day, 500 turns per day; 1 suites and 8 runs at once"
    )


# --- the decision door (runner.md §2.2, §21.7) ---------------------------------------------------------


def decision(**changes: str | None) -> DecisionPin | None:
    return Config.from_env(env(**changes)).decision


def test_the_gateway_leads_with_the_chat_door_key_and_typesafe_is_last() -> None:
    pin = decision(TYPESAFE_API_KEY="ts-key", CODER_DOOR_URL="https://ai-gateway.vercel.sh/")
    assert pin is not None
    assert pin.door_urls() == ("https://ai-gateway.vercel.sh", "https://api.typesafe.ai")
    assert pin.describe() == "https://ai-gateway.vercel.sh → https://api.typesafe.ai"
    assert [door.kind for door in pin.doors] == [JevDoorKind.GATEWAY, JevDoorKind.TYPESAFE]
    assert pin.fallbacks[0].key.expose() == DOOR_KEY
    assert pin.typesafe.key.expose() == "ts-key"


def test_an_explicit_gateway_key_and_openrouter_join_the_doors() -> None:
    pin = decision(
        TYPESAFE_API_KEY="ts-key",
        AI_GATEWAY_API_KEY="gw-key",
        OPENROUTER_API_KEY="or-key",
        CODER_DOOR_URL="https://door.example",
    )
    assert pin is not None
    assert pin.door_urls() == ("https://ai-gateway.vercel.sh", "https://openrouter.ai", "https://api.typesafe.ai")
    assert [door.key.expose() for door in pin.doors] == ["gw-key", "or-key", "ts-key"]


def test_another_chat_door_lends_no_key_and_blank_keys_add_no_door() -> None:
    pin = decision(TYPESAFE_API_KEY="ts-key", CODER_DOOR_URL="https://door.example", OPENROUTER_API_KEY="  ")
    assert pin is not None
    assert pin.doors == (JevDoorPin(JevDoorKind.TYPESAFE, "https://api.typesafe.ai", Secret("ts-key")),)
    assert pin.fallbacks == ()


def test_no_typesafe_key_is_no_decision_door() -> None:
    assert decision(AI_GATEWAY_API_KEY="gw-key", OPENROUTER_API_KEY="or-key") is None


def test_the_typesafe_url_is_named_without_its_trailing_slash() -> None:
    pin = decision(TYPESAFE_API_KEY="ts-key", TYPESAFE_BASE_URL="https://ts.example/", CODER_DOOR_URL="https://x")
    assert pin is not None
    assert pin.describe() == "https://ts.example"


def test_a_pin_always_ends_with_typesafe() -> None:
    with pytest.raises(ValueError, match="TypeSafe"):
        DecisionPin((JevDoorPin(JevDoorKind.GATEWAY, "https://ai-gateway.vercel.sh", Secret("k")),))


# --- secrets and the admission switch -----------------------------------------------------------------


def test_no_secret_is_in_the_printed_configuration() -> None:
    secrets = ["chat-door-secret-1", "gateway-secret-2", "openrouter-secret-3", "typesafe-secret-4"]
    config = Config.from_env(
        env(
            CODER_DOOR_KEY=secrets[0],
            AI_GATEWAY_API_KEY=secrets[1],
            OPENROUTER_API_KEY=secrets[2],
            TYPESAFE_API_KEY=secrets[3],
        )
    )
    printed = [repr(config), str(config), repr(config.door), repr(config.decision), f"{config}"]
    for secret in secrets:
        assert all(secret not in text for text in printed)
    assert "Secret(<hidden>)" in repr(config)
    assert set(config.secrets()) == set(secrets)


def test_a_secret_compares_by_value_and_is_immutable() -> None:
    assert Secret("a") == Secret("a")
    assert Secret("a") != Secret("b")
    with pytest.raises(AttributeError):
        Secret("a").text = "b"


def test_the_closed_file_closes_admission_at_once(tmp_path: Path) -> None:
    config = Config.from_env(env(EVAL_RUNNER_STATE=str(tmp_path)))
    assert not admission_closed(tmp_path)
    assert not config.admission_closed()
    (tmp_path / "closed").touch()
    assert admission_closed(tmp_path)
    assert config.admission_closed()
    (tmp_path / "closed").unlink()
    assert not config.admission_closed()


def test_values_are_quoted_as_python_shows_them() -> None:
    assert quoted("plain") == "'plain'"
    assert quoted("a\nb\rc\td\0") == "'a\\nb\\rc\\td\\x00'"
    assert quoted("\x1b[0m") == "'\\x1b[0m'"
    assert quoted("it's é") == '"it\'s é"'


# --- every problem at once (`check`) -------------------------------------------------------------------


def problems(environ: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        Config.from_env(environ)
    return caught.value.problems


def test_every_problem_is_listed_in_order_and_the_first_is_the_message() -> None:
    found = problems(
        env(
            EVAL_RUNNER_RELAY="http://x",
            EVAL_RUNNER_CATALOG=None,
            EVAL_RUNNER_CODER=None,
            CODER_DOOR_KEY=None,
            EVAL_RUNNER_RUNS_PER_DAY="0",
            EVAL_RUNNER_TURNS_PER_DAY="lots",
            EVAL_RUNNER_JOBS="0",
            EVAL_RUNNER_CONCURRENCY="9",
            EVAL_RUNNER_RUN_DISK_MB="big",
            EVAL_RUNNER_DISK_FLOOR_MB="-1",
            EVAL_RUNNER_BUCKET="s3://b",
            EVAL_RUNNER_GCLOUD_CONFIG="/g",
            EVAL_RUNNER_DEFAULTS_ROOT="x",
            EVAL_RUNNER_PROBE_MS="0",
            EVAL_RUNNER_RENEW_MS="soon",
        )
    )
    brake = "is an emergency brake: leave it unset for no limit, or set a positive number, not"
    assert found == (
        "EVAL_RUNNER_RELAY must be a ws:// or wss:// URL, not 'http://x'",
        "EVAL_RUNNER_CATALOG names no extension directory",
        "EVAL_RUNNER_CODER is not set",
        "no door key: set CODER_DOOR_KEY or CODER_AI_GATEWAY_KEY",
        f"EVAL_RUNNER_RUNS_PER_DAY {brake} '0'",
        f"EVAL_RUNNER_TURNS_PER_DAY {brake} 'lots'",
        "EVAL_RUNNER_CONCURRENCY must be from 1 to 8",
        "EVAL_RUNNER_JOBS must be at least 1",
        "EVAL_RUNNER_RUN_DISK_MB must be a number, not 'big'",
        "EVAL_RUNNER_DISK_FLOOR_MB must be a number, not '-1'",
        "EVAL_RUNNER_BUCKET needs EVAL_RUNNER_BLOSSOM, its public read base",
        "s3://b is not a gs:// bucket",
        "EVAL_RUNNER_DEFAULTS_ROOT must be a 64-hex public key",
        "EVAL_RUNNER_PROBE_MS is a positive number of milliseconds, not '0'",
        "EVAL_RUNNER_RENEW_MS is a positive number of milliseconds, not 'soon'",
    )
    assert refused(env(EVAL_RUNNER_RELAY="http://x", EVAL_RUNNER_CODER=None)) == found[0]


@pytest.mark.parametrize(("changes", "message"), MESSAGES)
def test_each_message_is_the_only_problem_when_it_is_the_only_mistake(
    changes: dict[str, str | None], message: str
) -> None:
    assert problems(env(**changes)) == (message,)


def test_a_number_that_does_not_parse_is_not_also_out_of_range() -> None:
    assert problems(env(EVAL_RUNNER_CONCURRENCY="x", EVAL_RUNNER_JOBS="y")) == (
        "EVAL_RUNNER_JOBS must be a number, not 'y'",
        "EVAL_RUNNER_CONCURRENCY must be a number, not 'x'",
    )


@pytest.mark.parametrize(("changes", "message"), MESSAGES)
def test_no_message_has_a_rust_idiom(changes: dict[str, str | None], message: str) -> None:
    assert_plain(refused(env(**changes)))


def test_the_idiom_check_sees_what_the_reference_printed() -> None:
    """The check above could fail: each of the reference's spellings is caught."""
    assert rust_idioms('EVAL_RUNNER_JOBS must be a number, not "a\\"b"') == ["{:?}-style quoting"]
    assert rust_idioms('not "\\u{1b}[0m"') == ["{:?}-style quoting"]
    assert rust_idioms("the runner key /k: No such file or directory (os error 2)") == ["an I/O error's (os error N)"]
    assert rust_idioms("finished k: 2 of 2 with the tool, Some(1) without, pass") == ["an Option printed as Some(...)"]
    assert rust_idioms("finished k: 2 of 2 with the tool, None without, pass") == ["an Option printed as None"]
    assert rust_idioms("EVAL_RUNNER_JOBS must be a number, not 'a\"b\\tc'") == []


#: Database URLs whose password libpq would quote in its own errors (a raw `%`, an unescaped `@`, a torn IPv6
#: bracket): refused when the configuration is read, in words that hold none of the URL.
UNREADABLE_URLS = [
    "postgresql://runner:p%4sS3cr@localhost/db",
    "postgresql://runner:pa@sS3cr@db.example/ledger",
    "postgresql://runner:S3cr@[::1/db",
]


@pytest.mark.parametrize("url", UNREADABLE_URLS)
def test_a_database_url_libpq_would_quote_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env(env(EVAL_RUNNER_DATABASE=url))
    said = " ".join(caught.value.problems)
    assert "EVAL_RUNNER_DATABASE: a URL that does not read" in said
    assert "S3cr" not in said


def test_a_percent_encoded_password_is_scrubbed_as_written_and_as_read() -> None:
    config = Config.from_env(env(EVAL_RUNNER_DATABASE="postgresql://runner:p%40ss%25w@localhost/db"))
    assert {"p%40ss%25w", "p@ss%w"} <= set(config.secrets())
