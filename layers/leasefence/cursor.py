"""The one opaque cursor codec: a page's resume point as URL-safe base64 of a small JSON object.

A cursor is opaque to callers and means nothing outside the call that made it: listings
(``{"o": operation id}``), histories (``{"s": seq}``) and tenant-erasure steps
(``{"p": phase, "at": position, "h": 1}``) each encode their own fields and check their values
after :func:`decode`. Anything that is not a cursor this codec made, or lacks a field the caller
needs, is :class:`~leasefence.errors.InvalidInput` (``cursor is not valid``), never a 500.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from leasefence.errors import InvalidInput

INVALID = "cursor is not valid"


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


def invalid() -> InvalidInput:
    """The error for a cursor whose fields :func:`decode` read but whose values are wrong."""
    return InvalidInput(INVALID)
