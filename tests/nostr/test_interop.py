"""Interop with nostr-sdk 0.45.1 (rust-nostr), an independent implementation.

Events signed by either side verify on the other with the same id; NIP-44 payloads made by either
side decrypt on the other. The last tests pin the known differences (ecosystem.md §2.3) that are
the reason nip44.py is hand-written; if the pinned version changes, they say what changed.
"""

from __future__ import annotations

import base64
import hmac
import json
from importlib.metadata import version

import nostr_sdk as sdk
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from eval_runner.nostr import Event, Nip44Error, PublicKey, SecretKey, conversation_key, decrypt, encrypt, sign
from eval_runner.nostr.nip44 import EXTENDED_MAX_PLAINTEXT, message_keys, pad

SDK_NIP44_ENCRYPT_CAP = 65_408  # rust-nostr's MAX_SUPPORTED_PLAINTEXT_SIZE = 65_536 - 128

CONTENTS = [
    "",
    "plain",
    'quote " backslash \\ newline \n tab \t',
    "\x00\x01\x1f\x7f",
    "é ✓ 🦄 \u2028\u2029",
    "x" * 5000,
]


def _sdk_keys(secret: SecretKey) -> sdk.Keys:
    return sdk.Keys.parse(secret.to_hex())


def _sdk_pub(public: PublicKey) -> sdk.PublicKey:
    return sdk.PublicKey.parse(public.to_hex())


def test_sdk_version_is_the_pinned_one() -> None:
    assert version("nostr-sdk") == "0.45.1"


@pytest.mark.parametrize("content", CONTENTS)
def test_sdk_signed_events_verify_with_ours(content: str) -> None:
    keys = sdk.Keys.generate()
    built = (
        sdk.EventBuilder(sdk.Kind(25920), content)
        .tags([sdk.Tag.parse(["p", "a" * 64]), sdk.Tag.parse(["expiration", "1700003600"]), sdk.Tag.parse(["t"])])
        .custom_created_at(sdk.Timestamp.from_secs(1_700_000_000))
        .finalize(keys)
    )
    ours = Event.from_json(json.loads(built.as_json()))
    ours.verify()
    assert ours.id == built.id().to_hex()
    assert ours.computed_id() == built.id().to_hex()
    assert ours.pubkey == keys.public_key().to_hex()
    assert ours.content == content


@pytest.mark.parametrize("content", CONTENTS)
def test_our_events_verify_with_sdk(content: str) -> None:
    secret = SecretKey.generate()
    ours = sign(secret, 26920, [["p", "b" * 64], ["e", "c" * 64], ["x", "y", "z"]], content, 1_700_000_001)
    theirs = sdk.Event.from_json(json.dumps(ours.to_json(), ensure_ascii=False))
    assert theirs.verify()
    assert theirs.id().to_hex() == ours.id
    assert theirs.author().to_hex() == ours.pubkey


def test_sdk_rejects_our_tampered_event() -> None:
    ours = sign(SecretKey.generate(), 1, [], "original", 1)
    tampered = {**ours.to_json(), "content": "changed"}
    try:
        theirs = sdk.Event.from_json(json.dumps(tampered))
    except sdk.NostrSdkError:
        return  # rejected while parsing: also a refusal
    assert not theirs.verify()


def test_bech32_agrees_with_sdk() -> None:
    for _ in range(5):
        secret = SecretKey.generate()
        keys = _sdk_keys(secret)
        assert keys.secret_key().to_bech32() == secret.to_bech32()
        assert keys.public_key().to_bech32() == secret.public_key().to_bech32()
        assert SecretKey.parse(keys.secret_key().to_bech32()) == secret


@pytest.mark.parametrize("length", [1, 31, 32, 33, 1000, 4096, 65_535 - 200, SDK_NIP44_ENCRYPT_CAP])
def test_sdk_nip44_payloads_decrypt_with_ours(length: int) -> None:
    alice, bob = SecretKey.generate(), SecretKey.generate()
    plaintext = "x" * (length - 3) + "✓" if length >= 3 else "x" * length  # `length` UTF-8 bytes
    assert len(plaintext.encode("utf-8")) == length
    payload = sdk.nip44_encrypt(
        _sdk_keys(alice).secret_key(), _sdk_pub(bob.public_key()), plaintext, sdk.Nip44Version.V2
    )
    assert decrypt(payload, conversation_key(bob, alice.public_key())) == plaintext


@pytest.mark.parametrize("length", [1, 32, 33, 1000, 4096, SDK_NIP44_ENCRYPT_CAP + 1, 65_535])
def test_our_nip44_payloads_decrypt_with_sdk(length: int) -> None:
    alice, bob = SecretKey.generate(), SecretKey.generate()
    plaintext = "q" * length
    payload = encrypt(plaintext, conversation_key(alice, bob.public_key()))
    assert sdk.nip44_decrypt(_sdk_keys(bob).secret_key(), _sdk_pub(alice.public_key()), payload) == plaintext


def _seal(padded: bytes, key: bytes, nonce: bytes) -> str:
    """A payload of arbitrary padded bytes with a valid MAC (same construction as nip44.encrypt)."""
    keys = message_keys(key, nonce)
    cipher = Cipher(algorithms.ChaCha20(keys.chacha_key, b"\0\0\0\0" + keys.chacha_nonce), mode=None)
    ciphertext = cipher.encryptor().update(padded)
    return base64.b64encode(
        b"\x02" + nonce + ciphertext + hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    ).decode()


def test_documented_sdk_differences() -> None:
    """Why nostr-sdk cannot be our NIP-44 decoder: each line is a place where the wire spec and it differ."""
    alice, bob = SecretKey.generate(), SecretKey.generate()
    key = conversation_key(alice, bob.public_key())
    sdk_bob, sdk_alice = _sdk_keys(bob).secret_key(), _sdk_pub(alice.public_key())

    # 1. It refuses to encrypt 65,409..65,535 bytes, which we (and the standard) allow.
    with pytest.raises(sdk.NostrSdkError):
        sdk.nip44_encrypt(_sdk_keys(alice).secret_key(), _sdk_pub(bob.public_key()), "x" * 65_409, sdk.Nip44Version.V2)

    # 2. It cannot read the reference's extended length form; we can, when asked to.
    extended = encrypt("y" * 100_000, key, max_len=EXTENDED_MAX_PLAINTEXT)
    with pytest.raises(sdk.NostrSdkError):
        sdk.nip44_decrypt(sdk_bob, sdk_alice, extended)
    assert decrypt(extended, key, max_len=EXTENDED_MAX_PLAINTEXT) == "y" * 100_000

    # 3. It accepts a non-zero padding tail, which the wire spec says to reject.
    padded = bytearray(pad(b"tail"))
    padded[-1] = 7
    tail = _seal(bytes(padded), key, bytes(32))
    assert sdk.nip44_decrypt(sdk_bob, sdk_alice, tail) == "tail"
    with pytest.raises(Nip44Error, match="zero"):
        decrypt(tail, key)
