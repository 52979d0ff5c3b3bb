"""Every official NIP-44 v2 vector, and the reference runner's pinned conversation fixture."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from eval_runner.nostr import NostrError, PublicKey, SecretKey
from eval_runner.nostr.errors import Nip44Error
from eval_runner.nostr.nip44 import (
    calc_padded_len,
    conversation_key,
    decrypt,
    encrypt,
    message_keys,
)
from tests.support.nip44_vectors import load_vectors
from tests.support.paths import VECTORS

OFFICIAL_SHA256 = "269ed0f69e4c192512cc779e78c555090cebc7c785b609e338a62afc3ce25040"
V2: dict[str, Any] = load_vectors("nip44.vectors.json")["v2"]
VALID = V2["valid"]
INVALID = V2["invalid"]


def _key(secret_hex: str, peer_secret_hex: str) -> bytes:
    return conversation_key(SecretKey.parse(secret_hex), SecretKey.parse(peer_secret_hex).public_key())


def test_vendored_file_is_the_official_one() -> None:
    digest = hashlib.sha256((VECTORS / "nip44.vectors.json").read_bytes()).hexdigest()
    assert digest == OFFICIAL_SHA256


def test_vector_counts_are_complete() -> None:
    counts = {
        "get_conversation_key": len(VALID["get_conversation_key"]),
        "get_message_keys": len(VALID["get_message_keys"]["keys"]),
        "calc_padded_len": len(VALID["calc_padded_len"]),
        "encrypt_decrypt": len(VALID["encrypt_decrypt"]),
        "encrypt_decrypt_long_msg": len(VALID["encrypt_decrypt_long_msg"]),
        "invalid_encrypt_msg_lengths": len(INVALID["encrypt_msg_lengths"]),
        "invalid_get_conversation_key": len(INVALID["get_conversation_key"]),
        "invalid_decrypt": len(INVALID["decrypt"]),
    }
    assert counts == {
        "get_conversation_key": 35,
        "get_message_keys": 32,
        "calc_padded_len": 24,
        "encrypt_decrypt": 10,
        "encrypt_decrypt_long_msg": 3,
        "invalid_encrypt_msg_lengths": 4,
        "invalid_get_conversation_key": 8,
        "invalid_decrypt": 12,
    }


@pytest.mark.parametrize("vector", VALID["get_conversation_key"])
def test_get_conversation_key(vector: dict[str, str]) -> None:
    derived = conversation_key(SecretKey.parse(vector["sec1"]), PublicKey.parse(vector["pub2"]))
    assert derived.hex() == vector["conversation_key"]


@pytest.mark.parametrize("vector", VALID["get_message_keys"]["keys"])
def test_get_message_keys(vector: dict[str, str]) -> None:
    key = bytes.fromhex(VALID["get_message_keys"]["conversation_key"])
    keys = message_keys(key, bytes.fromhex(vector["nonce"]))
    assert keys.chacha_key.hex() == vector["chacha_key"]
    assert keys.chacha_nonce.hex() == vector["chacha_nonce"]
    assert keys.hmac_key.hex() == vector["hmac_key"]
    # Same bytes as a from-scratch RFC 5869 expand, so the derivation is not accidentally tied to one library.
    expanded = HKDFExpand(SHA256(), 76, info=bytes.fromhex(vector["nonce"])).derive(key)
    assert expanded == keys.chacha_key + keys.chacha_nonce + keys.hmac_key


@pytest.mark.parametrize(("length", "padded"), VALID["calc_padded_len"])
def test_calc_padded_len(length: int, padded: int) -> None:
    assert calc_padded_len(length) == padded


@pytest.mark.parametrize("vector", VALID["encrypt_decrypt"])
def test_encrypt_decrypt(vector: dict[str, str]) -> None:
    key = _key(vector["sec1"], vector["sec2"])
    assert key.hex() == vector["conversation_key"]
    assert _key(vector["sec2"], vector["sec1"]) == key
    payload = encrypt(vector["plaintext"], key, bytes.fromhex(vector["nonce"]))
    assert payload == vector["payload"]
    assert decrypt(vector["payload"], key) == vector["plaintext"]


@pytest.mark.parametrize("vector", VALID["encrypt_decrypt_long_msg"])
def test_encrypt_decrypt_long_msg(vector: dict[str, Any]) -> None:
    plaintext = vector["pattern"] * vector["repeat"]
    assert hashlib.sha256(plaintext.encode("utf-8")).hexdigest() == vector["plaintext_sha256"]
    key = bytes.fromhex(vector["conversation_key"])
    payload = encrypt(plaintext, key, bytes.fromhex(vector["nonce"]))
    assert hashlib.sha256(payload.encode("ascii")).hexdigest() == vector["payload_sha256"]
    assert decrypt(payload, key) == plaintext


@pytest.mark.parametrize("length", INVALID["encrypt_msg_lengths"])
def test_invalid_encrypt_msg_lengths(length: int) -> None:
    key = bytes(range(32))
    with pytest.raises(Nip44Error) as caught:
        encrypt("a" * length, key)
    assert (caught.value.code, caught.value.path) == ("encrypt_failed", "plaintext")


@pytest.mark.parametrize("vector", INVALID["get_conversation_key"])
def test_invalid_get_conversation_key(vector: dict[str, str]) -> None:
    with pytest.raises(NostrError) as caught:
        conversation_key(SecretKey.parse(vector["sec1"]), PublicKey.parse(vector["pub2"]))
    assert caught.value.code == "invalid_key"


_DECRYPT_FAILURE_PATHS = {
    "unknown encryption version": "payload",
    "unknown encryption version 0": "payload.version",
    "invalid base64": "payload.base64",
    "invalid MAC": "payload.mac",
    "invalid padding": "payload.padding",
}


@pytest.mark.parametrize("vector", INVALID["decrypt"])
def test_invalid_decrypt(vector: dict[str, str]) -> None:
    key = bytes.fromhex(vector["conversation_key"])
    with pytest.raises(Nip44Error) as caught:
        decrypt(vector["payload"], key)
    expected_path = _DECRYPT_FAILURE_PATHS.get(vector["note"], "payload")
    assert (caught.value.code, caught.value.path) == ("decrypt_failed", expected_path)


def test_reference_conversation_fixture() -> None:
    digest = hashlib.sha256((VECTORS / "reference" / "nip44-conversation.json").read_bytes()).hexdigest()
    assert digest == "708744cae37de15cfdf93d1c38d994259947a5a7b31a6259a8aaa6c9f705bd82"
    fixture = load_vectors("reference/nip44-conversation.json")
    key = _key(fixture["secret_one"], fixture["secret_two"])
    assert key.hex() == fixture["conversation_key"]
    assert _key(fixture["secret_two"], fixture["secret_one"]) == key
    payload = encrypt(fixture["plaintext"], key, bytes.fromhex(fixture["nonce"]))
    assert payload == fixture["payload"]
    assert decrypt(fixture["payload"], key) == fixture["plaintext"]
