"""The batch routes' one shape (``POST /v1/batch/...``): each item run by its one-at-a-time
route's own code, its answer or its error (mapped by :mod:`leasefence.api.errors`, as that route
would answer it) kept in the item's place, and the request answered 200 once every item was
processed. Partial success is normal: an item's refusal never undoes or skips another item."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from aws_lambda_powertools.event_handler import Response

from leasefence.api import errors
from leasefence.api._shared import answer


def item_result(operation_id: str, one: Callable[[], Response]) -> dict[str, Any]:
    """``{"operation_id", "status", "body"}``: what ``one()`` answered, or its error's status and
    the contract's error body."""
    try:
        reply = one()
        status, body = reply.status_code, reply.body
    except Exception as exc:  # noqa: BLE001 - each item gets the answer its route would give
        status, body = errors.describe(exc)
    return {"operation_id": operation_id, "status": status, "body": body}


def batch_answer(items: Sequence[Any], one: Callable[[Any], Response]) -> Response:
    """200 with one result per item (:func:`item_result`), in the items' order."""
    results = []
    for item in items:
        results.append(item_result(item.operation_id, partial(one, item)))
    return answer(200, {"results": results})
