"""What a stream mapping's S3 on-failure destination holds, in one place: the invocation record
Lambda writes for a batch it gave up on (``DDBStreamBatchInfo``, and in S3 the records
themselves in ``payload``) and the name of its object
(``aws/lambda/<mapping UUID>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>``).

The local stack's mappings write it as Lambda does (:mod:`leasefence_tools.local.streams`), and the
shared stream function keeps the records it could not publish there itself
(:mod:`leasefence.worker.stream_router`), so that ``leasefence publisher redrive``
(:mod:`leasefence.streams.redrive`) replays both alike.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from leasefence.streams.mappings import FAILED_BATCH_PREFIX


def invocation_record(
    records: Sequence[Mapping[str, Any]],
    *,
    function_arn: str,
    attempts: int,
    shard: str,
    stream_arn: str,
    moment: datetime,
    condition: str = "RetryAttemptsExhausted",
    with_records: bool = True,
) -> dict[str, Any]:
    """The invocation record of a failed batch (``with_records``: the records in ``payload``,
    as an S3 destination gets them)."""
    created = [r["dynamodb"].get("ApproximateCreationDateTime") for r in records]
    message: dict[str, Any] = {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": function_arn,
            "condition": condition,
            "approximateInvokeCount": attempts,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled",
        },
        "version": "1.0",
        "timestamp": _iso(moment.timestamp()),
        "DDBStreamBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": _iso(created[0]),
            "approximateArrivalOfLastRecord": _iso(created[-1]),
            "batchSize": len(records),
            "streamArn": stream_arn,
        },
    }
    if with_records:
        message["payload"] = {"Records": list(records)}
    return message


def object_key(mapping_id: str, shard: str, moment: datetime) -> str:
    """The name Lambda gives a failed batch's object in an S3 destination."""
    return (
        f"{FAILED_BATCH_PREFIX}{mapping_id}/{shard}/{moment:%Y/%m/%d}/"
        f"{moment:%Y-%m-%dT%H.%M.%S}-{uuid.uuid4()}"
    )


def put_kept(
    s3: Any,
    bucket: str,
    records: Sequence[Mapping[str, Any]],
    *,
    mapping_id: str,
    function_arn: str,
    condition: str,
    attempts: int,
) -> str:
    """Write ``records`` (of one stream) to ``bucket`` as a failed batch; returns the key."""
    moment = datetime.now(UTC)
    stream_arn = str(records[0].get("eventSourceARN") or "")
    shard = "kept"
    key = object_key(mapping_id, shard, moment)
    body = invocation_record(
        records,
        function_arn=function_arn,
        attempts=attempts,
        shard=shard,
        stream_arn=stream_arn,
        moment=moment,
        condition=condition,
    )
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
    return key


def _iso(epoch_s: Any) -> str | None:
    if not isinstance(epoch_s, (int, float)):
        return None
    return (
        datetime.fromtimestamp(epoch_s, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
