"""secp256k1 keys as Nostr uses them: 32-byte secrets and x-only public keys.

`SecretKey` is a plain slotted class rather than a dataclass so that the
secret is never a public field: `repr`/`str` print `SecretKey(<hidden>)`,
equality is constant-time, and the only ways to get the bytes out are the
explicitly named `to_bytes` / `to_hex` / `to_bech32`. Parsing accepts 64 hex
characters or NIP-19 bech32 (`nsec1…` / `npub1…`); error messages never echo
the input, because the input may be a secret.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from coincurve import PrivateKey, PublicKeyXOnly

# coincurve's cffi binding of libsecp256k1 (private to coincurve, which is pinned <22): the keypair API.
from coincurve._libsecp256k1 import ffi as _ffi
from coincurve._libsecp256k1 import lib as _lib

from eval_runner.nostr.bech32 import bech32_decode, bech32_encode
from eval_runner.nostr.errors import KeyFormatError

_ANY_HEX64: Final = re.compile(r"[0-9a-fA-F]{64}")
_LOWER_HEX: Final = {length: re.compile(f"[0-9a-f]{{{length}}}") for length in (64, 128)}


def is_lower_hex(value: object, length: int) -> TypeGuard[str]:
    """True when `value` is a str of exactly `length` lowercase hex digits (length 64 or 128)."""
    return isinstance(value, str) and _LOWER_HEX[length].fullmatch(value) is not None


def _key_bytes(text: str, hrp: str, path: str) -> bytes:
    if not isinstance(text, str):
        raise KeyFormatError("invalid_key", path, "a key must be a string")
    if _ANY_HEX64.fullmatch(text):
        return bytes.fromhex(text)
    if text[: len(hrp) + 1].lower() == hrp + "1":
        found, data = bech32_decode(text)
        if found == hrp and len(data) == 32:
            return data
    raise KeyFormatError("invalid_key", path, f"expected 64 hex characters or a {hrp}1 bech32 string")


class SecretKey:
    """A secp256k1 secret scalar (1 ≤ k < n). Immutable; never printed."""

    __slots__ = ("_keypair", "_public", "_secret", "_signer")

    _secret: bytes
    _signer: PrivateKey
    _keypair: Any
    _public: PublicKey

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != 32:
            raise KeyFormatError("invalid_key", "secret", "a secret key is exactly 32 bytes")
        try:
            signer = PrivateKey(secret)
        except ValueError:
            raise KeyFormatError("invalid_key", "secret", "a secret key must be in 1..n-1") from None
        # libsecp256k1's keypair, made once: coincurve's `sign_schnorr` remakes it for every signature and
        # then verifies its own signature (~56 of its ~77 µs), and the runner signs every answer it sends.
        keypair = _ffi.new("secp256k1_keypair *")
        if not _lib.secp256k1_keypair_create(signer.context.ctx, keypair, signer.secret):
            raise KeyFormatError("invalid_key", "secret", "a secret key must be in 1..n-1")
        object.__setattr__(self, "_secret", secret)
        object.__setattr__(self, "_signer", signer)
        object.__setattr__(self, "_keypair", keypair)
        object.__setattr__(self, "_public", PublicKey(signer.public_key.format()[1:]))

    @classmethod
    def parse(cls, text: str) -> SecretKey:
        """Parse 64 hex characters or an `nsec1…` string."""
        return cls(_key_bytes(text, "nsec", "secret"))

    @classmethod
    def generate(cls) -> SecretKey:
        """A fresh key from the OS CSPRNG."""
        while True:
            try:
                return cls(secrets.token_bytes(32))
            except KeyFormatError:  # pragma: no cover - probability ~2^-128
                continue

    def public_key(self) -> PublicKey:
        return self._public

    def sign_schnorr(self, message32: bytes) -> bytes:
        """BIP-340 signature over a 32-byte message, with fresh auxiliary randomness.

        Through coincurve's libsecp256k1 binding with the keypair kept from construction. coincurve's own
        method would also re-verify the signature (a guard against faulty hardware); every receiver verifies
        our events anyway, and the tests check our signatures against coincurve and nostr-sdk."""
        if len(message32) != 32:
            raise ValueError("a BIP-340 message is exactly 32 bytes")
        signature = _ffi.new("unsigned char[64]")
        if not _lib.secp256k1_schnorrsig_sign32(
            self._signer.context.ctx, signature, message32, self._keypair, secrets.token_bytes(32)
        ):
            raise ValueError("libsecp256k1 could not sign")
        return bytes(_ffi.buffer(signature))

    def to_bytes(self) -> bytes:
        return self._secret

    def to_hex(self) -> str:
        return self._secret.hex()

    def to_bech32(self) -> str:
        return bech32_encode("nsec", self._secret)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SecretKey is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SecretKey):
            return NotImplemented
        return hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(("SecretKey", self._public.data))

    def __repr__(self) -> str:
        return "SecretKey(<hidden>)"

    __str__ = __repr__

    def __copy__(self) -> SecretKey:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> SecretKey:
        return self

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("SecretKey is not serialisable; store to_hex() deliberately if you must")


@dataclass(frozen=True, slots=True, repr=False)
class PublicKey:
    """A BIP-340 x-only public key (32 bytes, a valid curve x coordinate)."""

    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes) or len(self.data) != 32:
            raise KeyFormatError("invalid_key", "pubkey", "a public key is exactly 32 bytes")
        try:
            PublicKeyXOnly(self.data)
        except ValueError:
            raise KeyFormatError("invalid_key", "pubkey", "not an x coordinate on secp256k1") from None

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """Parse 64 hex characters or an `npub1…` string."""
        return cls(_key_bytes(text, "npub", "pubkey"))

    def to_hex(self) -> str:
        return self.data.hex()

    def to_bech32(self) -> str:
        return bech32_encode("npub", self.data)

    def __repr__(self) -> str:
        return f"PublicKey({self.data.hex()})"

    __str__ = __repr__
