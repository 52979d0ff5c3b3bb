"""NIP-44 v2 encryption (wire.md §2.4), hand-written on `cryptography` (ChaCha20, HKDF-expand) and stdlib HMAC.

Why not nostr-sdk (ecosystem.md §2.3): it rejects the reference's extended length prefix, accepts a
non-zero padding tail, refuses to encrypt above 65,408 bytes and is ~30× slower than this with a cached
conversation key. Decryption checks in the reference's order and raises only `Nip44Error("decrypt_failed",
path, …)`, `path` naming the part that failed; the size defaults and the paths are in decisions.md
("Nostr primitives: where NIP text, the reference and nostr-sdk leave room").
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from coincurve import PublicKey as PointKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from eval_runner.nostr.errors import Nip44Error
from eval_runner.nostr.keys import PublicKey, SecretKey

VERSION: Final = 2
STANDARD_MAX_PLAINTEXT: Final = 65_535
EXTENDED_MAX_PLAINTEXT: Final = 262_144
_EXTENDED_MIN: Final = 65_536
_MIN_PAYLOAD_CHARS: Final = 132
_MIN_DECODED: Final = 99  # version + nonce + (2-byte prefix + 32 padded) + MAC
_SALT: Final = b"nip44-v2"
_ZERO_COUNTER: Final = b"\0\0\0\0"
_SHA256: Final = SHA256()


def conversation_key(secret: SecretKey, peer: PublicKey) -> bytes:
    """The 32-byte key shared by `secret` and `peer` (symmetric between the two parties)."""
    try:
        shared = PointKey(b"\x02" + peer.data).multiply(secret.to_bytes()).format()[1:]
    except ValueError:  # pragma: no cover - SecretKey and PublicKey are validated on construction
        raise Nip44Error("invalid_key", "", "no shared point for this key pair") from None
    return hmac.digest(_SALT, shared, "sha256")


@dataclass(frozen=True, slots=True, repr=False)
class MessageKeys:
    """Per-message keys derived from the conversation key and nonce. Not printable."""

    chacha_key: bytes
    chacha_nonce: bytes
    hmac_key: bytes

    def __repr__(self) -> str:
        return "MessageKeys(<hidden>)"


def message_keys(conversation_key: bytes, nonce: bytes) -> MessageKeys:
    """HKDF-expand(PRK=conversation_key, info=nonce, L=76), split 32/12/32."""
    if len(conversation_key) != 32:
        raise Nip44Error("invalid_key", "conversation_key", "a conversation key is 32 bytes")
    if len(nonce) != 32:
        raise Nip44Error("encrypt_failed", "nonce", "a nonce is 32 bytes")
    okm = HKDFExpand(_SHA256, 76, info=nonce).derive(conversation_key)
    return MessageKeys(okm[:32], okm[32:44], okm[44:])


def calc_padded_len(length: int) -> int:
    """Padded plaintext size (without the length prefix) for a plaintext of `length` bytes."""
    if length < 1:
        raise Nip44Error("encrypt_failed", "plaintext", "plaintext must not be empty")
    if length <= 32:
        return 32
    next_power = 1 << (length - 1).bit_length()
    chunk = 32 if next_power <= 256 else next_power // 8
    return chunk * ((length - 1) // chunk + 1)


def max_payload_chars(max_len: int) -> int:
    """Longest base64 payload that can carry a plaintext of at most `max_len` bytes."""
    prefix = 6 if max_len >= _EXTENDED_MIN else 2
    raw = 1 + 32 + prefix + calc_padded_len(max_len) + 32
    return (raw + 2) // 3 * 4


def _check_max_len(max_len: int) -> None:
    if not 1 <= max_len <= EXTENDED_MAX_PLAINTEXT:
        raise Nip44Error("invalid_argument", "max_len", f"max_len must be in 1..{EXTENDED_MAX_PLAINTEXT}")


def _chacha20(keys: MessageKeys, data: bytes) -> bytes:
    cipher = Cipher(algorithms.ChaCha20(keys.chacha_key, _ZERO_COUNTER + keys.chacha_nonce), mode=None)
    return cipher.encryptor().update(data)


def pad(plaintext: bytes) -> bytes:
    """Length prefix (2-byte, or 6-byte extended from 65,536 bytes) ‖ plaintext ‖ zero padding."""
    length = len(plaintext)
    if not 1 <= length <= EXTENDED_MAX_PLAINTEXT:
        raise Nip44Error("encrypt_failed", "plaintext", f"plaintext must be 1..{EXTENDED_MAX_PLAINTEXT} bytes")
    prefix = length.to_bytes(2, "big") if length < _EXTENDED_MIN else b"\0\0" + length.to_bytes(4, "big")
    return prefix + plaintext + bytes(calc_padded_len(length) - length)


def unpad(padded: bytes, max_len: int = STANDARD_MAX_PLAINTEXT) -> bytes:
    """Inverse of `pad`, rejecting a wrong padded size, a non-zero tail and lengths above `max_len`."""
    if len(padded) < 2:
        raise Nip44Error("decrypt_failed", "payload.padding", "padding is truncated")
    length = int.from_bytes(padded[:2], "big")
    prefix = 2
    if length == 0:
        if len(padded) < 6:
            raise Nip44Error("decrypt_failed", "payload.padding", "extended length is truncated")
        length = int.from_bytes(padded[2:6], "big")
        prefix = 6
        if length < _EXTENDED_MIN:
            raise Nip44Error("decrypt_failed", "payload.padding", "extended length below 65,536 is not canonical")
    if length > max_len:
        raise Nip44Error("decrypt_failed", "payload.padding", f"plaintext length exceeds {max_len} bytes")
    if len(padded) != prefix + calc_padded_len(length):
        raise Nip44Error("decrypt_failed", "payload.padding", "padded size does not match the length")
    end = prefix + length
    if padded[end:].count(0) != len(padded) - end:
        raise Nip44Error("decrypt_failed", "payload.padding", "padding is not zero-filled")
    return padded[prefix:end]


def encrypt(
    plaintext: str,
    conversation_key: bytes,
    nonce: bytes | None = None,
    *,
    max_len: int = STANDARD_MAX_PLAINTEXT,
) -> str:
    """Encrypt `plaintext` (1..max_len UTF-8 bytes); `nonce` is random unless given (tests only).

    `max_len` defaults to the standard 65,535 so peers with standard libraries
    can read the result; pass up to 262,144 to use the extended prefix.
    """
    _check_max_len(max_len)
    if not isinstance(plaintext, str):
        raise Nip44Error("encrypt_failed", "plaintext", "plaintext must be a string")
    try:
        data = plaintext.encode("utf-8")
    except UnicodeEncodeError:
        raise Nip44Error("encrypt_failed", "plaintext", "plaintext is not valid Unicode") from None
    if not 1 <= len(data) <= max_len:
        raise Nip44Error("encrypt_failed", "plaintext", f"plaintext must be 1..{max_len} bytes")
    if nonce is None:
        nonce = secrets.token_bytes(32)
    keys = message_keys(conversation_key, nonce)
    ciphertext = _chacha20(keys, pad(data))
    mac = hmac.digest(keys.hmac_key, nonce + ciphertext, "sha256")
    return base64.b64encode(b"\x02" + nonce + ciphertext + mac).decode("ascii")


def decrypt(payload: str, conversation_key: bytes, max_len: int = STANDARD_MAX_PLAINTEXT) -> str:
    """Decrypt a payload whose plaintext is at most `max_len` bytes (262,144 admits the extended form)."""
    _check_max_len(max_len)
    if len(conversation_key) != 32:
        raise Nip44Error("invalid_key", "conversation_key", "a conversation key is 32 bytes")
    if not isinstance(payload, str):
        raise Nip44Error("decrypt_failed", "payload", "payload must be a string")
    if payload.startswith("#"):
        raise Nip44Error("decrypt_failed", "payload", "payload encoding is not supported")
    if not _MIN_PAYLOAD_CHARS <= len(payload) <= max_payload_chars(max_len):
        raise Nip44Error("decrypt_failed", "payload", "payload size is outside the bound")
    try:
        encoded = payload.encode("ascii")
        # strict_mode refuses characters outside the alphabet and misplaced padding, but (like
        # b64decode(validate=True)) accepts non-zero trailing bits: the re-encoding catches those.
        decoded = binascii.a2b_base64(encoded, strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        raise Nip44Error("decrypt_failed", "payload.base64", "payload is not base64") from None
    if binascii.b2a_base64(decoded, newline=False) != encoded:
        raise Nip44Error("decrypt_failed", "payload.base64", "payload base64 is not canonical")
    if len(decoded) < _MIN_DECODED:
        raise Nip44Error("decrypt_failed", "payload.length", "decoded payload is too short")
    if decoded[0] != VERSION:
        raise Nip44Error("decrypt_failed", "payload.version", f"version {decoded[0]} is not supported")
    nonce = decoded[1:33]
    keys = message_keys(conversation_key, nonce)
    expected = hmac.digest(keys.hmac_key, decoded[1:-32], "sha256")
    if not hmac.compare_digest(expected, decoded[-32:]):
        raise Nip44Error("decrypt_failed", "payload.mac", "MAC does not match")
    plaintext = unpad(_chacha20(keys, decoded[33:-32]), max_len)
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise Nip44Error("decrypt_failed", "plaintext", "plaintext is not valid UTF-8") from None


class ConversationKeys:
    """A bounded LRU of conversation keys keyed by (our public key, peer public key).

    The ECDH behind a conversation key costs more than a 4 KiB encrypt and
    decrypt together; a runner talks to few peers, so caching pays.
    Thread-safe; holds derived keys (never the secrets) and never prints them.
    """

    __slots__ = ("_capacity", "_entries", "_lock")

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._entries: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, secret: SecretKey, peer: PublicKey) -> bytes:
        slot = (secret.public_key().data, peer.data)
        with self._lock:
            found = self._entries.get(slot)
            if found is not None:
                self._entries.move_to_end(slot)
                return found
        derived = conversation_key(secret, peer)
        with self._lock:
            self._entries[slot] = derived
            self._entries.move_to_end(slot)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return derived

    def encrypt(
        self, secret: SecretKey, peer: PublicKey, plaintext: str, *, max_len: int = STANDARD_MAX_PLAINTEXT
    ) -> str:
        return encrypt(plaintext, self.get(secret, peer), max_len=max_len)

    def decrypt(
        self, secret: SecretKey, peer: PublicKey, payload: str, *, max_len: int = STANDARD_MAX_PLAINTEXT
    ) -> str:
        return decrypt(payload, self.get(secret, peer), max_len)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"ConversationKeys(capacity={self._capacity}, cached={len(self._entries)})"
