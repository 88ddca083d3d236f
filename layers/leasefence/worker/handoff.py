"""The ``invoke`` dispatch mode: the stream function claims a job and hands the claim to an
asynchronous invocation of the worker function, instead of running the job inside the stream
batch (``WorkerProps(stream_dispatch="invoke")``).

A batch then lasts as long as its claims (milliseconds a record), not as long as its slowest
job, so a stream shard's ``ParallelizationFactor`` no longer bounds how many jobs run at once:
the worker function's concurrency does (its reserved concurrency, else the account's). The claim
travels in the event (:func:`claim_event`, its values in DynamoDB's attribute-value form, so that
numbers, checkpoints and intents come back exactly); the invocation runs it through the worker
runtime (:func:`claim_from_event`), heartbeats and closing write included. Lambda queues an
asynchronous event for at most the function's maximum event age (one minute, no retries: the
worker function's settings); a claim whose invocation never runs is an ordinary lapsed lease,
which the scheduled drain takes over, fenced.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from leasefence.model import Claim, TargetClass

#: The key of an event that carries a claim to run.
CLAIM_EVENT = "leasefence_claim"
#: The fields of :class:`Claim` that stay in the process that made it (a payload is loaded
#: again by the invocation that runs the job; ``payload_json`` is never sent).
_LOCAL_FIELDS = ("payload", "payload_json")


def claim_event(claim: Claim) -> dict[str, Any]:
    """The event of an asynchronous invocation that runs ``claim``."""
    from boto3.dynamodb.types import TypeSerializer

    values = {
        f.name: getattr(claim, f.name)
        for f in dataclasses.fields(claim)
        if f.name not in _LOCAL_FIELDS
    }
    values["target_class"] = claim.target_class.value
    serialize = TypeSerializer().serialize
    return {CLAIM_EVENT: {name: serialize(_plain(v)) for name, v in values.items()}}


def claim_from_event(event: Mapping[str, Any]) -> Claim:
    """The claim :func:`claim_event` carried."""
    from boto3.dynamodb.types import TypeDeserializer

    deserialize = TypeDeserializer().deserialize
    values = {name: deserialize(v) for name, v in event[CLAIM_EVENT].items()}
    for name in ("fence", "attempts", "lease_expires_at", "lease_ms", "claimed_at", "layout"):
        if values.get(name) is not None:
            values[name] = int(values[name])
    values["target_class"] = TargetClass(values["target_class"])
    return Claim(**values)


def lambda_handoff(
    client: Callable[[], Any], function_name: str, qualifier: str | None = None
) -> Callable[[Claim], None]:
    """Hand a claim to an asynchronous invocation (``InvocationType=Event``) of ``function_name``
    (``qualifier``: the version that hands it over, so that a SnapStart version hands to itself,
    not to ``$LATEST``)."""
    version = {"Qualifier": qualifier} if qualifier and qualifier != "$LATEST" else {}

    def handoff(claim: Claim) -> None:
        client().invoke(
            FunctionName=function_name,
            InvocationType="Event",
            Payload=json.dumps(claim_event(claim), separators=(",", ":")).encode(),
            **version,
        )

    return handoff


def _plain(value: Any) -> Any:
    """A value TypeSerializer takes (floats as Decimal: it refuses floats)."""
    from decimal import Decimal

    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
