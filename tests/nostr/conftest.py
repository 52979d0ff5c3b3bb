"""Shared fixtures for the Nostr primitive tests: fixed keys."""

from __future__ import annotations

import pytest

from eval_runner.nostr import SecretKey


@pytest.fixture(scope="session")
def alice() -> SecretKey:
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000001")


@pytest.fixture(scope="session")
def bob() -> SecretKey:
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000002")
