"""NIP-44 rules the official vectors do not cover (wire.md §2.4): the extended length prefix,
the zero padding tail, canonical base64, size boundaries, and the conversation-key cache.

Payloads with deliberate defects are sealed here with `cryptography` and `hmac` directly, so each
carries a valid MAC and the test reaches the rule it is about.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from eval_runner.nostr import ConversationKeys, Nip44Error, PublicKey, SecretKey, nip44
from eval_runner.nostr.nip44 import (
    EXTENDED_MAX_PLAINTEXT,
    calc_padded_len,
    conversation_key,
    decrypt,
    encrypt,
    max_payload_chars,
    message_keys,
    pad,
)

KEY = bytes.fromhex("c41c775356fd92eadc63ff5a0dc1da211b268cbea22316767095b2871ea1412d")
NONCE = bytes(range(32))


def seal_raw(padded: bytes, key: bytes = KEY, nonce: bytes = NONCE, version: int = 2) -> str:
    """Encrypt arbitrary padded bytes with a valid MAC, bypassing our pad()."""
    keys = message_keys(key, nonce)
    cipher = Cipher(algorithms.ChaCha20(keys.chacha_key, b"\0\0\0\0" + keys.chacha_nonce), mode=None)
    ciphertext = cipher.encryptor().update(padded)
    mac = hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    return base64.b64encode(bytes([version]) + nonce + ciphertext + mac).decode("ascii")


def open_raw(payload: str, key: bytes = KEY) -> bytes:
    """The padded plaintext inside a payload, without any of our checks."""
    raw = base64.b64decode(payload)
    keys = message_keys(key, raw[1:33])
    cipher = Cipher(algorithms.ChaCha20(keys.chacha_key, b"\0\0\0\0" + keys.chacha_nonce), mode=None)
    return cipher.decryptor().update(raw[33:-32])


def failure(payload: str, max_len: int = 65_535) -> Nip44Error:
    with pytest.raises(Nip44Error) as caught:
        decrypt(payload, KEY, max_len)
    assert caught.value.code == "decrypt_failed"
    return caught.value


def test_sealed_helper_matches_encrypt() -> None:
    assert seal_raw(pad(b"hello")) == encrypt("hello", KEY, NONCE)


# extended length form


def test_extended_form_round_trip_and_prefix() -> None:
    plaintext = "z" * 100_000
    payload = encrypt(plaintext, KEY, NONCE, max_len=EXTENDED_MAX_PLAINTEXT)
    padded = open_raw(payload)
    assert padded[:6] == b"\0\0" + (100_000).to_bytes(4, "big")
    assert len(padded) == 6 + calc_padded_len(100_000)
    assert decrypt(payload, KEY, max_len=EXTENDED_MAX_PLAINTEXT) == plaintext


def test_extended_form_needs_max_len() -> None:
    payload = encrypt("z" * 100_000, KEY, max_len=EXTENDED_MAX_PLAINTEXT)
    assert failure(payload).path == "payload"  # longer than the standard bound
    assert decrypt(payload, KEY, max_len=100_000) == "z" * 100_000
    assert failure(payload, max_len=99_999).path == "payload.padding"


def test_extended_length_below_65536_is_rejected() -> None:
    body = b"q" * 1_000
    padded = b"\0\0" + len(body).to_bytes(4, "big") + body + bytes(calc_padded_len(1_000) - 1_000)
    error = failure(seal_raw(padded), max_len=EXTENDED_MAX_PLAINTEXT)
    assert error.path == "payload.padding"
    assert "canonical" in error.message


def test_short_prefix_cannot_claim_extended_sizes() -> None:
    body = b"q" * 70_000
    padded = (70_000 % 65_536).to_bytes(2, "big") + body + bytes(calc_padded_len(70_000) - 70_000)
    assert failure(seal_raw(padded), max_len=EXTENDED_MAX_PLAINTEXT).path == "payload.padding"


# padding


def test_nonzero_padding_tail_is_rejected() -> None:
    padded = bytearray(pad(b"hello"))
    padded[-1] = 1
    error = failure(seal_raw(bytes(padded)))
    assert error.path == "payload.padding"
    assert "zero" in error.message


def test_nonzero_tail_in_extended_form_is_rejected() -> None:
    padded = bytearray(pad(b"w" * 70_000))
    padded[6 + 70_000] = 0x80
    assert failure(seal_raw(bytes(padded)), max_len=EXTENDED_MAX_PLAINTEXT).path == "payload.padding"


def test_wrong_padded_size_is_rejected() -> None:
    assert failure(seal_raw(pad(b"hello") + bytes(32))).path == "payload.padding"


def test_zero_length_is_rejected() -> None:
    assert failure(seal_raw(bytes(34))).path == "payload.padding"


def test_non_utf8_plaintext_is_rejected() -> None:
    padded = (2).to_bytes(2, "big") + b"\xff\xfe" + bytes(30)
    assert failure(seal_raw(padded)).path == "plaintext"


# base64 and framing


def _noncanonical(payload: str) -> str:
    """Same bytes, but the unused low bits of the last data character set."""
    assert payload.endswith("=")
    assert not payload.endswith("==")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(payload[-2])
    assert last & 0b11 == 0
    return payload[:-2] + alphabet[last | 0b01] + "="


def test_noncanonical_base64_is_rejected() -> None:
    payload = encrypt("x" * 40, KEY, NONCE)  # 131 raw bytes: one "=" and two spare bits
    altered = _noncanonical(payload)
    assert altered != payload
    # Python's own strict decoder accepts it, which is why decrypt re-encodes to compare.
    assert base64.b64decode(altered, validate=True) == base64.b64decode(payload)
    assert decrypt(payload, KEY) == "x" * 40
    assert failure(altered).path == "payload.base64"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda p: p[:70] + "\n" + p[71:],
        lambda p: p[:70] + "-" + p[71:],
        lambda p: p[:70] + "é" + p[71:],
        lambda p: p[:-4] + "====",
        lambda p: "=" + p[1:],
    ],
)
def test_non_base64_is_rejected(mangle: Callable[[str], str]) -> None:
    payload = encrypt("x" * 40, KEY, NONCE)
    assert failure(mangle(payload)).path == "payload.base64"


def test_hash_prefix_and_bad_version() -> None:
    payload = encrypt("hello", KEY, NONCE)
    assert failure("#" + payload[1:]).message == "payload encoding is not supported"
    assert failure(seal_raw(pad(b"hello"), version=1)).path == "payload.version"


def test_tampered_ciphertext_or_mac_fails_the_mac() -> None:
    raw = bytearray(base64.b64decode(encrypt("hello world", KEY, NONCE)))
    for index in (1, 40, len(raw) - 1):
        tampered = bytearray(raw)
        tampered[index] ^= 0x01
        assert failure(base64.b64encode(bytes(tampered)).decode()).path == "payload.mac"


def test_other_key_fails_the_mac() -> None:
    payload = encrypt("hello", KEY, NONCE)
    with pytest.raises(Nip44Error) as caught:
        decrypt(payload, bytes(32))
    assert caught.value.path == "payload.mac"


def test_short_payload_is_rejected_before_decoding() -> None:
    assert failure("A" * 128).path == "payload"


def test_decoded_length_below_99_is_rejected() -> None:
    # 132 characters whose last 36 are padding-like: decodes to fewer than 99 bytes.
    payload = base64.b64encode(b"\x02" + bytes(96)).decode()  # 97 bytes -> 132 chars
    assert len(payload) == 132
    assert failure(payload).path == "payload.length"


# size boundaries


def test_standard_maximum_65535() -> None:
    plaintext = "m" * 65_535
    payload = encrypt(plaintext, KEY)
    assert len(payload) == max_payload_chars(65_535) == 87_472
    assert open_raw(payload)[:2] == (65_535).to_bytes(2, "big")
    assert decrypt(payload, KEY) == plaintext


def test_65536_is_extended_only() -> None:
    plaintext = "m" * 65_536
    with pytest.raises(Nip44Error):
        encrypt(plaintext, KEY)
    payload = encrypt(plaintext, KEY, max_len=EXTENDED_MAX_PLAINTEXT)
    assert open_raw(payload)[:6] == b"\0\0\0\x01\0\0"
    assert decrypt(payload, KEY, max_len=EXTENDED_MAX_PLAINTEXT) == plaintext
    assert failure(payload).path == "payload"


def test_extended_maximum_262144_and_one_more() -> None:
    plaintext = "m" * EXTENDED_MAX_PLAINTEXT
    payload = encrypt(plaintext, KEY, max_len=EXTENDED_MAX_PLAINTEXT)
    assert len(payload) == max_payload_chars(EXTENDED_MAX_PLAINTEXT) == 349_620
    assert decrypt(payload, KEY, max_len=EXTENDED_MAX_PLAINTEXT) == plaintext
    with pytest.raises(Nip44Error) as caught:
        encrypt(plaintext + "m", KEY, max_len=EXTENDED_MAX_PLAINTEXT)
    assert caught.value.path == "plaintext"
    with pytest.raises(Nip44Error) as caught:
        decrypt(payload, KEY, max_len=EXTENDED_MAX_PLAINTEXT + 1)
    assert caught.value.code == "invalid_argument"


def test_multibyte_length_counts_bytes() -> None:
    plaintext = "é" * 32_768  # 65,536 UTF-8 bytes
    with pytest.raises(Nip44Error):
        encrypt(plaintext, KEY)
    assert decrypt(encrypt(plaintext, KEY, max_len=70_000), KEY, 70_000) == plaintext


def test_random_nonce_differs_each_time() -> None:
    assert encrypt("same", KEY) != encrypt("same", KEY)


def test_lone_surrogate_plaintext_is_refused() -> None:
    with pytest.raises(Nip44Error) as caught:
        encrypt("\ud800", KEY)
    assert caught.value.path == "plaintext"


# keys and the cache


def test_message_keys_are_not_printable() -> None:
    keys = message_keys(KEY, NONCE)
    assert repr(keys) == "MessageKeys(<hidden>)"
    assert keys.hmac_key.hex() not in repr(keys)


def test_conversation_key_cache(monkeypatch: pytest.MonkeyPatch, alice: SecretKey) -> None:
    peers = [SecretKey.generate().public_key() for _ in range(3)]
    calls: list[bytes] = []

    def counted(secret: SecretKey, peer: PublicKey) -> bytes:
        calls.append(peer.data)
        return conversation_key(secret, peer)

    monkeypatch.setattr(nip44, "conversation_key", counted)
    cache = ConversationKeys(capacity=2)
    assert cache.get(alice, peers[0]) == conversation_key(alice, peers[0])
    cache.get(alice, peers[0])
    assert len(calls) == 1
    cache.get(alice, peers[1])
    cache.get(alice, peers[0])  # refresh: peers[1] is now the oldest
    cache.get(alice, peers[2])
    assert len(cache) == 2
    cache.get(alice, peers[0])
    assert len(calls) == 3
    cache.get(alice, peers[1])
    assert calls == [peers[0].data, peers[1].data, peers[2].data, peers[1].data]
    assert conversation_key(alice, peers[0]).hex() not in repr(cache)


def test_cache_encrypt_decrypt_between_two_parties(alice: SecretKey, bob: SecretKey) -> None:
    cache = ConversationKeys()
    payload = cache.encrypt(alice, bob.public_key(), "to bob")
    assert cache.decrypt(bob, alice.public_key(), payload) == "to bob"
    assert len(cache) == 2
