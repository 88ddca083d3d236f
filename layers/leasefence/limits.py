"""Contract limits that the runtime and the constructs share (standard library only: the CDK
app imports this without the engine).

Fences of one fence epoch lie in ``[epoch * FENCE_EPOCH_SPAN + 1, (epoch + 1) * FENCE_EPOCH_SPAN]``.
A point-in-time restore rolls the table's fences back, but not what class-B targets saw: restored
into a new table under the next epoch, every claim's fence starts above every fence handed out
before (the first claim of an operation in the new epoch jumps to the epoch's floor). No
operation is claimed a billion times, and fences stay below 2**53 (JSON-safe) up to the epoch
:data:`MAX_FENCE_EPOCH`.
"""

from __future__ import annotations

#: The largest fence (and any integer the API accepts as one): JSON-safe.
MAX_FENCE = 2**53 - 1
FENCE_EPOCH_SPAN = 1_000_000_000
MAX_FENCE_EPOCH = MAX_FENCE // FENCE_EPOCH_SPAN - 1
