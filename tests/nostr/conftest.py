"""Shared fixtures for the Nostr primitive tests: vendored vectors (never ../shared) and fixed keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eval_runner.nostr import SecretKey
from tests.support.paths import TESTS

VECTORS = TESTS / "vectors"


def load_vectors(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def alice() -> SecretKey:
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000001")


@pytest.fixture(scope="session")
def bob() -> SecretKey:
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000002")
