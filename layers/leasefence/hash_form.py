"""The two forms an operation item's ``payload_hash`` may be stored in.

Every reader of this release takes both, and gives the rest of the code (and every client) the
text form only:

* **text**: ``"sha256:"`` and 64 lowercase hex digits, the contract's form, 71 bytes stored;
* **digest**: the 32 bytes of the SHA-256 digest as a binary attribute, 32 bytes stored.

An ended item keeps its hash for the identity retention (400 days by default), so the digest
form saves 39 of its bytes (about $0.21 per million lifecycles of storage and backup). Writers
keep the text form until every reader of a table takes both (a reader from before this module
cannot read a digest): a two-step rollout, as packed payloads had. The single conversion point
for what the table answers is :func:`leasefence.store.from_item` (every item the store reads,
every refused write's ``ALL_OLD`` item and every stream image goes through it); a condition on
the hash names both forms (:func:`condition_values`).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Final

from leasefence.validation import HASH_RE

ATTRIBUTE: Final = "payload_hash"
PREFIX: Final = "sha256:"
DIGEST_BYTES: Final = 32


def as_text(value: Any) -> Any:
    """The text form of a stored hash: a digest (bytes, or boto3's ``Binary``) of 32 bytes
    becomes ``sha256:<hex>``; anything else is returned unchanged (text as stored)."""
    raw = getattr(value, "value", value)  # boto3.dynamodb.types.Binary keeps its bytes here
    if isinstance(raw, (bytes, bytearray)) and len(raw) == DIGEST_BYTES:
        return PREFIX + bytes(raw).hex()
    return value


def as_digest(text: str) -> bytes:
    """The digest form of a text hash (``sha256:`` and 64 lowercase hex digits)."""
    if not HASH_RE.fullmatch(text):
        raise ValueError("not a sha256: hash of 64 lowercase hex digits")
    return bytes.fromhex(text[len(PREFIX) :])


def read(item: MutableMapping[str, Any]) -> None:
    """An item as read from the table, with its ``payload_hash`` in the text form."""
    if ATTRIBUTE in item:
        item[ATTRIBUTE] = as_text(item[ATTRIBUTE])


def condition_values(text: str) -> dict[str, Any]:
    """The values :data:`SAME` names (``:h``, ``:h_digest``): the stored hash is ``text`` in
    either form."""
    return {":h": text, ":h_digest": as_digest(text)}


#: The item's hash is the one in :func:`condition_values` (either form).
SAME: Final = f"({ATTRIBUTE} = :h OR {ATTRIBUTE} = :h_digest)"
