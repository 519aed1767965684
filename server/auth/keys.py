"""The API key format: `b3os_sk_<32 base32>_<checksum>`.

The body is 160 random bits written as 32 characters of lowercase Crockford base32 (the alphabet
of request ids). The checksum is the CRC-32 (IEEE 802.3, as `zlib.crc32`) of the ASCII text
before it, `b3os_sk_<body>`, written as 7 characters of the same alphabet, most significant
first. It catches a key cut short or mistyped before any lookup. Keys are stored only as the
SHA-256 of the whole key; the first 8 characters of the body name the key in listings."""

from __future__ import annotations

import hashlib
import re
import secrets
import zlib
from dataclasses import dataclass

from server.ids import CROCKFORD, encode_crockford

PREFIX = "b3os_sk_"
BODY_CHARS = 32
CHECKSUM_CHARS = 7
_SHAPE = re.compile(
    rf"^{PREFIX}([{CROCKFORD}]{{{BODY_CHARS}}})_([{CROCKFORD}]{{{CHECKSUM_CHARS}}})$"
)


class KeyFormatError(ValueError):
    """The text is not a well-formed key; the message says what to check."""


@dataclass(frozen=True, slots=True)
class ParsedKey:
    text: str

    @property
    def key_id(self) -> str:
        """The public name of the key: `key_` and the first 8 characters of its body."""
        return "key_" + self.text[len(PREFIX) : len(PREFIX) + 8]

    @property
    def hash(self) -> str:
        return key_hash(self.text)


def checksum(head: str) -> str:
    return encode_crockford(zlib.crc32(head.encode("ascii")), CHECKSUM_CHARS)


def new_key() -> str:
    body = encode_crockford(secrets.randbits(BODY_CHARS * 5), BODY_CHARS)
    head = PREFIX + body
    return f"{head}_{checksum(head)}"


def parse(text: str) -> ParsedKey:
    """The key, once its shape and checksum hold."""
    match = _SHAPE.match(text)
    if match is None:
        raise KeyFormatError(
            f"API key is malformed; expected {PREFIX}<{BODY_CHARS} characters>_"
            f"<{CHECKSUM_CHARS} characters>"
        )
    if checksum(PREFIX + match.group(1)) != match.group(2):
        raise KeyFormatError("API key checksum does not match; check that the whole key was copied")
    return ParsedKey(text)


def key_hash(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()
