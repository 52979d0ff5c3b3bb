"""Keys: hex and NIP-19 bech32 parsing, validation, and that a secret never prints."""

from __future__ import annotations

import copy
import hashlib
import pickle

import pytest

from eval_runner.nostr import KeyFormatError, PublicKey, SecretKey
from eval_runner.nostr.bech32 import bech32_decode, bech32_encode

# NIP-19's own examples.
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
NPUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
NSEC_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
G_X = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"


def test_nip19_examples() -> None:
    assert PublicKey.parse(NPUB).to_hex() == NPUB_HEX
    assert PublicKey.parse(NPUB_HEX).to_bech32() == NPUB
    assert SecretKey.parse(NSEC).to_hex() == NSEC_HEX
    assert SecretKey.parse(NSEC_HEX).to_bech32() == NSEC


def test_public_key_of_one_is_the_generator() -> None:
    assert SecretKey.parse("00" * 31 + "01").public_key().to_hex() == G_X


def test_uppercase_forms_parse() -> None:
    assert PublicKey.parse(NPUB.upper()).to_hex() == NPUB_HEX
    assert SecretKey.parse(NSEC_HEX.upper()).to_hex() == NSEC_HEX


def test_generate_gives_distinct_working_keys() -> None:
    first, second = SecretKey.generate(), SecretKey.generate()
    assert first != second
    assert SecretKey.parse(first.to_hex()) == first
    assert first.public_key() == SecretKey.parse(first.to_bech32()).public_key()


def test_secret_never_prints() -> None:
    secret = SecretKey.parse(NSEC_HEX)
    for text in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret]), repr({"k": secret})):
        assert NSEC_HEX not in text
        assert NSEC not in text
    assert repr(secret) == "SecretKey(<hidden>)"


def test_secret_is_immutable_and_not_picklable() -> None:
    secret = SecretKey.parse(NSEC_HEX)
    with pytest.raises(AttributeError):
        secret._secret = bytes(32)
    with pytest.raises(TypeError):
        pickle.dumps(secret)
    assert copy.deepcopy(secret) is secret


def test_secret_equality_and_hash() -> None:
    assert SecretKey.parse(NSEC) == SecretKey.parse(NSEC_HEX)
    assert hash(SecretKey.parse(NSEC)) == hash(SecretKey.parse(NSEC_HEX))
    assert SecretKey.parse(NSEC) != SecretKey.parse(G_X)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00" * 32,  # zero
        "ff" * 32,  # above the group order
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",  # exactly n
        NSEC_HEX[:-1],
        NSEC_HEX + "0",
        "g" + NSEC_HEX[1:],
        NPUB,  # wrong prefix for a secret
        NSEC[:-1] + ("q" if NSEC[-1] != "q" else "p"),  # checksum
    ],
)
def test_bad_secret_keys(text: str) -> None:
    with pytest.raises(KeyFormatError) as caught:
        SecretKey.parse(text)
    assert caught.value.code == "invalid_key"
    if text:
        assert text not in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "ff" * 32,  # not an x coordinate
        "00" * 32,
        NSEC,
        NPUB[:5] + NPUB[5:].upper(),  # mixed case
        "npub1" + "q" * 58,
    ],
)
def test_bad_public_keys(text: str) -> None:
    with pytest.raises(KeyFormatError):
        PublicKey.parse(text)


def test_public_key_requires_32_bytes() -> None:
    with pytest.raises(KeyFormatError):
        PublicKey(b"\x01" * 31)
    with pytest.raises(KeyFormatError):
        SecretKey(b"\x01" * 33)


def test_bech32_round_trip_and_bip173_rules() -> None:
    data = bytes(range(32))
    text = bech32_encode("npub", data)
    assert bech32_decode(text) == ("npub", data)
    assert bech32_decode(text.upper()) == ("npub", data)
    with pytest.raises(KeyFormatError):
        bech32_decode("x" * 91)
    with pytest.raises(KeyFormatError):
        bech32_decode("npub1 " + text[6:])
    with pytest.raises(KeyFormatError):
        bech32_decode(text.replace("1", "b", 1))  # separator gone
    # BIP-173 example of a valid checksum with an empty data part.
    assert bech32_decode("a12uel5l") == ("a", b"")


def test_a_schnorr_signature_verifies_under_coincurve_and_each_one_is_fresh() -> None:
    from coincurve import PublicKeyXOnly

    secret = SecretKey.generate()
    message = hashlib.sha256(b"answer").digest()
    first, second = secret.sign_schnorr(message), secret.sign_schnorr(message)
    signer = PublicKeyXOnly(bytes.fromhex(secret.public_key().to_hex()))
    assert signer.verify(first, message)
    assert signer.verify(second, message)
    assert first != second  # fresh auxiliary randomness each time
    assert not signer.verify(first, hashlib.sha256(b"other").digest())
    with pytest.raises(ValueError, match="32 bytes"):
        secret.sign_schnorr(b"short")
