"""Strings as the table stores them: bounded in bytes (UTF-8), DynamoDB's measure.

Ids and free text are limited in characters where they are accepted (:mod:`leasefence.validation`),
but an item's size, a key's size and every write's cost are counted in bytes, and a character of
UTF-8 takes up to four. Where a string is stored in a place that repeats (a history entry) or
that has a byte limit of its own (a key), it is stored through one of these, so the bound in
bytes holds for ids of any script (:mod:`leasefence.item_budget`).
"""

from __future__ import annotations

import hashlib

from leasefence.limits import MAX_ENTRY_ID_BYTES

#: What a cut id ends with before its digest: a reader sees that it was cut.
CUT_MARK = "\u2026"
#: Hex characters of the SHA-256 digest of the whole id that a cut id ends with (64 bits: two
#: long ids that share their first bytes still read differently).
CUT_DIGEST_CHARS = 16


def cut_bytes(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8, whole characters only."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode(errors="ignore")


def stored_id(value: str, max_bytes: int = MAX_ENTRY_ID_BYTES) -> str:
    """``value`` as stored where it is shown, never compared: itself when it fits ``max_bytes``
    bytes (every ASCII id of up to 256 characters, every id of up to 64 characters of any script),
    else its first bytes (whole characters), :data:`CUT_MARK` and a digest of the whole id."""
    if len(value.encode()) <= max_bytes:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:CUT_DIGEST_CHARS]
    tail = CUT_MARK + digest
    return cut_bytes(value, max_bytes - len(tail.encode())) + tail
