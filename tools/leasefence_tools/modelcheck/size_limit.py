"""A store-side fault: an operation's item at the store's item size limit.

DynamoDB refuses any write that would make an item larger than 400 KB. The engine bounds what
it writes (:mod:`leasefence.item_budget`), so an item reaches the limit only through a long
history, and the engine's answer to an update refused for size is to compact that history
itself and send the update again (``Store.make_room``): a write refused for size must have a
way out. At the model's bounds an item stays a few KB, so the model puts an item at the limit
instead (the ``limit`` step, enabled only when the item holds more history than the compaction
keeps: what an item at the limit holds, by the item budget): from then on the store refuses
every update of that item that does not make it smaller, as DynamoDB would (moto's own
``ItemSizeTooLarge`` answer), and the first update that makes it smaller (a compaction) brings
it back under the limit.

Layout-free: the fault compares the item's size (moto's) before and after the update; it never
reads the item's attributes.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import TYPE_CHECKING, Any

from leasefence_tools.modelcheck.direct_client import DirectClient

if TYPE_CHECKING:
    from leasefence_tools.modelcheck.world import World


def at_limit_client(world: World, at_limit: list[str]) -> DirectClient:
    """The world's client, with the items of the operations ``at_limit`` at the size limit;
    an operation leaves the list when an update made its item smaller."""
    clone = copy.copy(world.client)
    clone.send = functools.partial(_send, world, at_limit)  # type: ignore[method-assign]
    return clone


def _send(world: World, at_limit: list[str], operation: Any, body: bytes) -> tuple[int, bytes]:
    send = world.client.send
    if operation.name != "UpdateItem":
        return send(operation, body)
    key = json.loads(body)["Key"]
    op = key.get("operation_id", {}).get("S")
    if op not in at_limit:
        return send(operation, body)
    before_size = world.item_size(key)
    before = world.current()
    status, answer = send(operation, body)
    if status >= 300:
        return status, answer
    if world.item_size(key) >= before_size:
        from moto.dynamodb.exceptions import ItemSizeTooLarge

        world.restore(before)  # refused: the table as it was
        refusal = ItemSizeTooLarge()
        return refusal.code, refusal.get_body().encode()
    at_limit.remove(op)  # smaller: under the limit again
    return status, answer
