"""Bech32 (BIP-173) for NIP-19 `npub` / `nsec` keys.

Written here rather than taken from a package: the codec is ~60 lines, the small bech32 packages on PyPI
are unmaintained reference copies, and the runner only needs the 32-byte key forms (classic bech32 only;
NIP-19 does not use bech32m).
"""

from __future__ import annotations

from eval_runner.nostr.errors import KeyFormatError

_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_VALUES = {char: index for index, char in enumerate(_CHARSET)}
_GENERATORS = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
_MAX_LENGTH = 90


def _polymod(values: list[int]) -> int:
    checksum = 1
    for value in values:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value
        for bit, generator in enumerate(_GENERATORS):
            if (top >> bit) & 1:
                checksum ^= generator
    return checksum


def _hrp_expand(hrp: str) -> list[int]:
    return [ord(char) >> 5 for char in hrp] + [0] + [ord(char) & 31 for char in hrp]


def _convert_bits(data: bytes | list[int], from_bits: int, to_bits: int, pad: bool) -> list[int] | None:
    accumulator = 0
    bits = 0
    out: list[int] = []
    mask = (1 << to_bits) - 1
    for value in data:
        accumulator = (accumulator << from_bits) | value
        bits += from_bits
        while bits >= to_bits:
            bits -= to_bits
            out.append((accumulator >> bits) & mask)
    if pad:
        if bits:
            out.append((accumulator << (to_bits - bits)) & mask)
    elif bits >= from_bits or (accumulator << (to_bits - bits)) & mask:
        return None
    return out


def bech32_encode(hrp: str, data: bytes) -> str:
    """Encode `data` under the lowercase human-readable part `hrp`."""
    words = _convert_bits(data, 8, 5, pad=True)
    assert words is not None  # padding never fails
    checksum_input = [*_hrp_expand(hrp), *words, 0, 0, 0, 0, 0, 0]
    polymod = _polymod(checksum_input) ^ 1
    checksum = [(polymod >> 5 * (5 - index)) & 31 for index in range(6)]
    return hrp + "1" + "".join(_CHARSET[word] for word in [*words, *checksum])


def bech32_decode(text: str) -> tuple[str, bytes]:
    """Decode a bech32 string into (lowercase hrp, bytes); raises `KeyFormatError`."""
    if len(text) > _MAX_LENGTH or any(ord(char) < 33 or ord(char) > 126 for char in text):
        raise KeyFormatError("invalid_key", "bech32", "not a bech32 string")
    if text.lower() != text and text.upper() != text:
        raise KeyFormatError("invalid_key", "bech32", "bech32 string mixes upper and lower case")
    lowered = text.lower()
    separator = lowered.rfind("1")
    if separator < 1 or separator + 7 > len(lowered):
        raise KeyFormatError("invalid_key", "bech32", "bech32 separator or checksum missing")
    hrp = lowered[:separator]
    try:
        words = [_VALUES[char] for char in lowered[separator + 1 :]]
    except KeyError:
        raise KeyFormatError("invalid_key", "bech32", "bech32 data has a character outside the alphabet") from None
    if _polymod([*_hrp_expand(hrp), *words]) != 1:
        raise KeyFormatError("invalid_key", "bech32", "bech32 checksum does not match")
    decoded = _convert_bits(words[:-6], 5, 8, pad=False)
    if decoded is None:
        raise KeyFormatError("invalid_key", "bech32", "bech32 data has non-zero padding bits")
    return hrp, bytes(decoded)
