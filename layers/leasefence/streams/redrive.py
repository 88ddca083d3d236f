"""Replay what the publisher's mapping gave up on (``leasefence publisher redrive``).

The publisher's event source mapping sends a batch that still fails after its retries to its
on-failure destination, an S3 bucket. For an S3 destination Lambda writes one object per batch,
named ``aws/lambda/<mapping UUID>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>``: the invocation
record (``requestContext``, ``responseContext``, ``DDBStreamBatchInfo``) and, only in S3, the
whole event in ``payload`` (an SQS or SNS destination gets the shard and sequence numbers alone,
and the records themselves are gone once the stream trims them after 24 hours). The object stays
until a redrive has replayed it.

:func:`redrive` reads every such object, takes its records (from ``payload``; an object without
one is read back from the stream with its ``DDBStreamBatchInfo`` while the stream still holds
those records), and replays each operation's records in the order of their ``seq`` through
:class:`~leasefence.streams.publisher.Publisher`, the function's own code: the history places
each entry by ``seq`` (one it holds already changes nothing) and the event is published again.
Records in an object that the publisher's filter does not pass (a batch of the shared
mapping also holds the worker's) are left out. An object is deleted once every record in it went
through; when a record fails again the later
records of the same operation wait (so its events stay in order) and the objects holding them
stay for the next redrive, with the error reported. Given the operation as it is now
(``current``), a record is not replayed (and counts as done) when what it would say is gone: the
operation was deleted since (its identity expired, or its tenant was erased: the history went
with it), the id now names a later operation, or the operation was erased after the record was
written (its history keeps only the erasure, and an event would repeat the erased text).
Running it again is always safe; a record replayed twice publishes its event twice (consumers
dedupe on ``(tenant_id, operation_id, sequence)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from leasefence.streams import filters, records
from leasefence.streams.mappings import FAILED_BATCH_PREFIX as PREFIX

#: ``GetRecords`` calls spent reading one batch back from the stream.
_MAX_READS = 100


@dataclass
class Kept:
    """One object of the destination: its records, in the order they were delivered."""

    key: str
    records: list[dict[str, Any]]
    #: Why its records could not be had (no ``payload`` and the stream no longer holds them).
    unreadable: str | None = None


@dataclass
class RedriveReport:
    objects: int = 0
    records: int = 0
    #: Records that went through the publisher, by what it did (recorded, published, ...).
    outcomes: dict[str, int] = field(default_factory=dict)
    #: Records that failed again: the object, the record's stream sequence number, the error.
    failed: list[dict[str, str]] = field(default_factory=list)
    #: Records not replayed because an earlier record of their operation failed.
    waiting: int = 0
    #: Records not replayed because their operation is gone, replaced or erased since.
    superseded: int = 0
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    unreadable: list[dict[str, str]] = field(default_factory=list)
    dry_run: bool = False

    @property
    def replayed(self) -> int:
        return sum(self.outcomes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "objects": self.objects,
            "records": self.records,
            "replayed": self.replayed,
            "outcomes": dict(sorted(self.outcomes.items())),
            "failed": self.failed,
            "waiting": self.waiting,
            "superseded": self.superseded,
            "deleted": len(self.deleted),
            "kept": self.kept,
            "unreadable": self.unreadable,
            "dry_run": self.dry_run,
        }


def batch_records(document: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The records of an on-failure invocation record, or None when it holds none (an SQS or
    SNS destination's, or one whose ``payload`` was left out)."""
    payload = document.get("payload")
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return None
    if isinstance(payload, dict) and isinstance(payload.get("Records"), list):
        return [r for r in payload["Records"] if isinstance(r, dict)]
    return None


def _from_stream(streams: Any, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The records ``info`` (``DDBStreamBatchInfo``) names, read back from the stream, as Lambda
    delivers them, those the publisher's filter passes."""
    end = int(info["endSequenceNumber"])
    iterator = streams.get_shard_iterator(
        StreamArn=info["streamArn"],
        ShardId=info["shardId"],
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        SequenceNumber=info["startSequenceNumber"],
    )["ShardIterator"]
    wanted = filters.publisher_filters()
    found: list[dict[str, Any]] = []
    for _ in range(_MAX_READS):
        if not iterator:
            break
        answer = streams.get_records(ShardIterator=iterator, Limit=1000)
        for raw in answer.get("Records", []):
            body = dict(raw["dynamodb"])
            if int(body["SequenceNumber"]) > end:
                return found
            created = body.get("ApproximateCreationDateTime")
            if isinstance(created, datetime):
                body["ApproximateCreationDateTime"] = created.timestamp()
            record = {**{k: v for k, v in raw.items() if k != "dynamodb"}, "dynamodb": body}
            record["eventSourceARN"] = info["streamArn"]
            if filters.passes(wanted, record):
                found.append(record)
            if int(body["SequenceNumber"]) == end:
                return found
        if not answer.get("Records"):
            break
        iterator = answer.get("NextShardIterator")
    return found


def read_kept(s3: Any, bucket: str, streams: Any | None = None) -> Iterator[Kept]:
    """Every object of the destination, oldest first (the names start with the date)."""
    keys: list[str] = []
    token: str | None = None
    while True:
        page = s3.list_objects_v2(
            Bucket=bucket, Prefix=PREFIX, **({"ContinuationToken": token} if token else {})
        )
        keys += [o["Key"] for o in page.get("Contents", [])]
        token = page.get("NextContinuationToken")
        if not token:
            break
    # Oldest first: after the mapping and shard, the name is the time the batch was given up.
    keys.sort(key=lambda k: (k.split("/", 4)[-1], k))
    for key in keys:
        try:
            document = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except ValueError as error:
            yield Kept(key, [], unreadable=f"not JSON: {error}"[:300])
            continue
        found = batch_records(document) if isinstance(document, dict) else None
        if found is not None:
            found = [r for r in found if _for_publisher(r)]
        if found is None:
            info = document.get("DDBStreamBatchInfo") if isinstance(document, dict) else None
            if streams is None or not isinstance(info, dict):
                yield Kept(key, [], unreadable="no records in the object and no stream to read")
                continue
            try:
                found = _from_stream(streams, info)
            except Exception as error:  # noqa: BLE001 - trimmed, gone: reported, the object stays
                yield Kept(key, [], unreadable=f"{type(error).__name__}: {error}"[:300])
                continue
            if not found:
                yield Kept(key, [], unreadable="the stream no longer holds its records")
                continue
        yield Kept(key, found)


def _for_publisher(record: dict[str, Any]) -> bool:
    """Whether a kept record is the publisher's: a batch of the shared mapping (worker and
    publisher, :func:`leasefence.streams.mappings.shared`) holds the worker's records too, which
    the drain has long served. A record that cannot be read stays, to be reported."""
    try:
        records.parse(record)
    except records.MalformedRecord:
        return True
    return filters.passes(filters.publisher_filters(), record)


def _order(record: dict[str, Any]) -> tuple[Any, ...]:
    """An operation's records in the order of its writes: by incarnation (``created_at``), then
    ``seq``; a deletion after the last write of its incarnation. Unreadable records last."""
    try:
        change = records.parse(record)
    except records.MalformedRecord:
        return (1, "", "", 0, 0, 0)
    image = change.new if change.new is not None else change.old or {}
    return (
        0,
        change.tenant_id,
        change.operation_id,
        int(image.get("created_at", 0) or 0),
        int(image.get("seq", 0) or 0),
        1 if change.event_name == "REMOVE" else 0,
    )


def _operation(record: dict[str, Any]) -> tuple[str, str] | None:
    try:
        change = records.parse(record)
    except records.MalformedRecord:
        return None
    return change.tenant_id, change.operation_id


def _superseded(record: dict[str, Any], current: Callable[[str, str], Any]) -> bool:
    """The record's operation was deleted, replaced by a later one of the same id, or erased
    after the record was written (see the module's docstring)."""
    try:
        change = records.parse(record)
    except records.MalformedRecord:
        return False  # it fails again in the publisher, and is reported
    if not change.is_operation or change.event_name == "REMOVE":
        return False
    image = change.new or {}
    now = current(change.key["tenant_id"], change.operation_id)
    if now is None:
        return True
    if int(now.get("created_at", 0)) != int(image.get("created_at", 0)):
        return int(now.get("created_at", 0)) > int(image.get("created_at", 0))
    return now.get("erased_at") is not None and image.get("erased_at") is None


def redrive(
    s3: Any,
    bucket: str,
    handle: Callable[[dict[str, Any]], str],
    streams: Any | None = None,
    dry_run: bool = False,
    current: Callable[[str, str], Any] | None = None,
) -> RedriveReport:
    """Replay every object of the publisher's on-failure bucket through ``handle`` (the
    publisher's :meth:`~leasefence.streams.publisher.Publisher.handle`) and delete the objects
    whose records all went through. ``streams``: a DynamoDB Streams client, to read back the
    records of an object that holds none. ``dry_run``: only count what is there. ``current``:
    the operation item as it is now (``(tenant_id, operation_id) -> item or None``), to leave
    out records whose operation is gone, replaced or erased since."""
    report = RedriveReport(dry_run=dry_run)
    kept = list(read_kept(s3, bucket, streams))
    report.objects = len(kept)
    pending: dict[str, int] = {}
    work: list[tuple[tuple[Any, ...], int, int, str, dict[str, Any]]] = []
    for index, item in enumerate(kept):
        if item.unreadable is not None:
            report.unreadable.append({"object": item.key, "why": item.unreadable})
            continue
        pending[item.key] = len(item.records)
        for position, record in enumerate(item.records):
            work.append((_order(record), index, position, item.key, record))
    report.records = len(work)
    if dry_run:
        report.kept = [item.key for item in kept]
        return report
    work.sort(key=lambda w: (w[0], w[1], w[2]))
    stopped: set[tuple[str, str]] = set()
    for _, _, _, key, record in work:
        operation = _operation(record)
        if operation is not None and operation in stopped:
            report.waiting += 1
            continue
        try:
            if current is not None and _superseded(record, current):
                report.superseded += 1
                pending[key] -= 1
                continue
            outcome = handle(record)
        except Exception as error:  # noqa: BLE001 - reported; the object stays for the next run
            if operation is not None:
                stopped.add(operation)
            report.failed.append(
                {
                    "object": key,
                    "sequence_number": str((record.get("dynamodb") or {}).get("SequenceNumber")),
                    "error": f"{type(error).__name__}: {error}"[:300],
                }
            )
            continue
        report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        pending[key] -= 1
    for item in kept:
        if item.unreadable is None and pending.get(item.key) == 0:
            s3.delete_object(Bucket=bucket, Key=item.key)
            report.deleted.append(item.key)
        else:
            report.kept.append(item.key)
    return report
