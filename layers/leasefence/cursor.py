"""The one cursor codec: what a page cursor looks like, and what it means.

A cursor is opaque to callers and names a position, never a query: the next page starts after it,
and the tenant always comes from the caller (a cursor carries none). Anything that is not a cursor
of the format the call reads is :class:`~leasefence.errors.InvalidInput` (``cursor is not valid``),
never a 500.

The HTTP API's cursors each have a declared pattern, and each format is total over its pattern:
every string the pattern admits decodes to a position, and every other string is refused. So the
OpenAPI document states exactly which cursors are accepted (the pattern), and a client or a fuzzer
that sends one the pattern admits is never refused for it.

* Operation listings (``GET /v1/operations``): ``o`` and the unpadded base64url of the UTF-8 of
  the page's last position (:data:`OPERATION_CURSOR_PATTERN`). Any such string is a position:
  its bytes read as UTF-8 (a byte that is not UTF-8 reads as U+FFFD), at most
  :data:`MAX_POSITION_BYTES` bytes of it; the page starts after it. A listing walks the
  tenant's write shards in order, each in id order: a position in shard 0 is the last operation
  id (the cursors of a deployment with one shard, as before), one in shard ``n >= 1`` is
  ``\t<n>\t`` + the id (:func:`decode_listing_position`; no operation id has a control
  character, so the two never meet).
* Histories (``GET /v1/operations/{id}/history``): the ``seq`` of the last entry of the page, in
  decimal (:data:`HISTORY_CURSOR_PATTERN`); the page starts after it.

Both patterns admit the empty string: no cursor, the first page. Cursors of earlier versions
(base64url of a JSON object, starting ``eyJ``) match neither pattern: they are refused (422
``invalid_request``), never read as another position.

Steps that are not HTTP pages (tenant erasure: ``{"p": phase, "at": position, "h": 1}``) use
:func:`encode` / :func:`decode`, the URL-safe base64 of a small JSON object whose fields the
caller checks after decoding (:func:`invalid` for a value that is wrong).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from leasefence.errors import InvalidInput

INVALID = "cursor is not valid"

#: A DynamoDB sort key holds at most 1024 bytes: a position is cut to that (an id never is: 256
#: characters of at most 4 bytes each).
MAX_POSITION_BYTES = 1024
_B64 = "[A-Za-z0-9_-]"
#: ``o`` and an unpadded base64url string of at most 1025 bytes (341 quads and a tail); the
#: empty string (no cursor: the first page) too.
OPERATION_CURSOR_PATTERN = rf"^(?:o(?:{_B64}{{4}}){{0,341}}(?:{_B64}{{2,3}})?)?$"
#: A ``seq`` in decimal, at most 15 digits (below 2**53); the empty string (the first page) too.
HISTORY_CURSOR_PATTERN = r"^[0-9]{0,15}$"
_OPERATION_CURSOR = re.compile(OPERATION_CURSOR_PATTERN)
_HISTORY_CURSOR = re.compile(HISTORY_CURSOR_PATTERN)


def invalid() -> InvalidInput:
    """The error for a cursor that is not one the call reads."""
    return InvalidInput(INVALID)


# ---------------------------------------------------------------- the HTTP API's page cursors


def encode_operation_cursor(operation_id: str) -> str:
    """The cursor of a listing page that ended at ``operation_id``."""
    return "o" + base64.urlsafe_b64encode(operation_id.encode("utf-8")).decode("ascii").rstrip("=")


#: Starts a listing position in a write shard above 0: ``\t<shard>\t<operation id>``.
_SHARD_POSITION = re.compile("\t([0-9]{1,4})\t(.*)", re.DOTALL)


def encode_listing_cursor(shard: int, operation_id: str) -> str:
    """The cursor of a listing page that ended at ``operation_id`` of write shard ``shard`` (the
    empty id: before the shard's first operation)."""
    return encode_operation_cursor(operation_id if shard == 0 else f"\t{shard}\t{operation_id}")


def decode_listing_position(cursor: str) -> tuple[int, str]:
    """The write shard and the position in it that a listing cursor names. Total over the
    pattern: a position that is not a shard's reads as one in shard 0, as before."""
    position = decode_operation_cursor(cursor)
    shard = _SHARD_POSITION.fullmatch(position)
    if shard is None:
        return 0, position
    return int(shard.group(1)), shard.group(2)


def decode_operation_cursor(cursor: str) -> str:
    """The position a listing cursor names (:class:`InvalidInput` for one the pattern refuses)."""
    if not isinstance(cursor, str) or not _OPERATION_CURSOR.fullmatch(cursor):
        raise invalid()
    if not cursor:
        return ""
    body = cursor[1:]
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as error:  # the pattern admits none of these
        raise invalid() from error
    position = raw.decode("utf-8", errors="replace")
    while len(position.encode("utf-8")) > MAX_POSITION_BYTES:
        position = position[:-1]
    return position


def encode_history_cursor(seq: int) -> str:
    """The cursor of a history page that ended at the entry ``seq``."""
    return str(int(seq))


def decode_history_cursor(cursor: str) -> int:
    """The ``seq`` a history cursor names (:class:`InvalidInput` for one the pattern refuses)."""
    if not isinstance(cursor, str) or not _HISTORY_CURSOR.fullmatch(cursor):
        raise invalid()
    return int(cursor) if cursor else 0


# ---------------------------------------------------------------- step cursors (not HTTP pages)


def encode(fields: Mapping[str, Any]) -> str:
    """The cursor for ``fields`` (JSON values), without base64 padding."""
    return base64.urlsafe_b64encode(json.dumps(dict(fields)).encode()).decode().rstrip("=")


def decode(cursor: str, keys: Iterable[str]) -> dict[str, Any]:
    """The fields of a cursor made by :func:`encode`; every name in ``keys`` must be there (other
    fields are optional: read them with ``.get``). :class:`InvalidInput` otherwise."""
    try:
        fields = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(fields, dict):
            raise TypeError(type(fields).__name__)
        for key in keys:
            if key not in fields:
                raise KeyError(key)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as error:
        raise InvalidInput(INVALID) from error
    return fields
