"""The bench's payload: 979 bytes of canonical JSON that do not compress (issue 32).

An order's fields and a note of random bytes, base64-encoded: drawn from a seeded generator, so
every run sends the very same bytes, and incompressible, so that no figure (an item's size, a
write's units, a log line's bytes) is met by compressing a repetitive payload. Its zlib ratio is
reported beside the figures (:func:`zlib_ratio`: about 0.8; a payload of one repeated character
compresses to about 0.08).
"""

from __future__ import annotations

import base64
import random
import zlib
from typing import Any

#: The seed of the note's random bytes (any fixed value: repeatability, not secrecy).
SEED = 32
#: Random bytes in the note: base64 makes them 900 characters, the payload 979 bytes.
NOTE_RANDOM_BYTES = 675

#: The job's input, as the producer sends it.
PAYLOAD: dict[str, Any] = {
    "order_id": "ord-" + "7" * 12,
    "amount_cents": 12999,
    "currency": "EUR",
    "note": base64.b64encode(random.Random(SEED).randbytes(NOTE_RANDOM_BYTES)).decode("ascii"),
}


def canonical() -> bytes:
    """The payload's canonical JSON (what the service hashes and stores)."""
    from leasefence.payloads import canonicalize

    return canonicalize(PAYLOAD).body


def zlib_ratio(body: bytes | None = None) -> float:
    """Compressed size over size (zlib, level 9): near 1 for incompressible bytes."""
    data = canonical() if body is None else body
    return round(len(zlib.compress(data, 9)) / len(data), 3)


def describe() -> dict[str, Any]:
    """What the report says of the payload."""
    body = canonical()
    return {
        "bytes": len(body),
        "zlib_ratio": zlib_ratio(body),
        "made_of": f"an order's fields and a note of {NOTE_RANDOM_BYTES} random bytes "
        f"(random.Random({SEED}).randbytes), base64-encoded",
    }
