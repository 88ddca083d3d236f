"""The page cursors of the HTTP API: what a cursor looks like, and what it means.

A cursor names a position, never a query: the next page starts after it, and the tenant always
comes from the caller (a cursor carries none). Each format is total over its pattern: every string
the pattern admits decodes to a position, and every other string is refused. So the OpenAPI
document states exactly which cursors are accepted (the pattern), and a client or a fuzzer that
sends one the pattern admits is never refused for it.

* Operation listings (``GET /v1/operations``): ``o`` and the unpadded base64url of the UTF-8 of
  the last operation id of the page (:data:`OPERATION_CURSOR_PATTERN`). Any such string is a
  position: its bytes read as UTF-8 (a byte that is not UTF-8 reads as U+FFFD), at most
  :data:`MAX_POSITION_BYTES` bytes of it; the page starts after it in id order.
* Histories (``GET /v1/operations/{id}/history``): the ``seq`` of the last entry of the page, in
  decimal (:data:`HISTORY_CURSOR_PATTERN`); the page starts after it.

Both patterns admit the empty string: no cursor, the first page.

Cursors of earlier versions (base64url of a JSON object, starting ``eyJ``) match neither pattern:
they are refused (422 ``invalid_request``), never read as another position.
"""

from __future__ import annotations

import base64
import binascii
import re

from leasefence.errors import InvalidInput

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


def encode_operation_cursor(operation_id: str) -> str:
    """The cursor of a listing page that ended at ``operation_id``."""
    return "o" + base64.urlsafe_b64encode(operation_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_operation_cursor(cursor: str) -> str:
    """The position a listing cursor names (:class:`InvalidInput` for one the pattern refuses)."""
    if not isinstance(cursor, str) or not _OPERATION_CURSOR.fullmatch(cursor):
        raise InvalidInput("cursor is not valid")
    if not cursor:
        return ""
    body = cursor[1:]
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as error:  # the pattern admits none of these
        raise InvalidInput("cursor is not valid") from error
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
        raise InvalidInput("cursor is not valid")
    return int(cursor) if cursor else 0
