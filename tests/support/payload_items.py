"""A payload item's bytes as the DynamoDB client returns the item: its text (``payload_json``) or
its packed canonical JSON (``payload_z``, raw DEFLATE: leasefence.payloads.pack)."""

from __future__ import annotations

import zlib
from typing import Any


def body_of(raw_item: dict[str, Any]) -> bytes:
    """The canonical JSON a payload item (in the client's wire shape) holds."""
    if "payload_z" in raw_item:
        return zlib.decompress(raw_item["payload_z"]["B"], -zlib.MAX_WBITS)
    return raw_item["payload_json"]["S"].encode()


def text_of(item: dict[str, Any]) -> str:
    """The canonical JSON a payload item as the engine's store reads it holds, as text."""
    if "payload_z" in item:
        packed = item["payload_z"]
        return zlib.decompress(bytes(getattr(packed, "value", packed)), -zlib.MAX_WBITS).decode()
    return str(item["payload_json"])


#: Printable ASCII that canonical JSON keeps as it is (no quote, no backslash).
_PLAIN = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\')


def noise(length: int, seed: int = 0) -> str:
    """``length`` characters that hardly pack (random printable ASCII: about 6.6 bits a byte, so
    DEFLATE keeps about 85%): a payload padded with 1,500 of them stays over what a payload item
    keeps (1 KiB packed) and goes to S3, where padding of repeated characters would pack to a
    few bytes and stay in DynamoDB."""
    import random

    rng = random.Random(seed)
    return "".join(rng.choice(_PLAIN) for _ in range(length))
