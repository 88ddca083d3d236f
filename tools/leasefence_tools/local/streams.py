"""Lambda event source mappings on the embedded table's stream, for the local stack.

:class:`EventSourceMapping` does locally what a Lambda event source mapping on a DynamoDB stream
does on AWS, with the same function code and the same event shape: it reads the stream
(``GetRecords`` on the embedded endpoint, moto's DynamoDB Streams), drops the records its filter
criteria do not match (:func:`leasefence.streams.filters.passes`), and invokes the function with
batches of the rest (``{"Records": [...]}``, each record as Lambda delivers it). The answer is
read as Lambda reads it:

* an error (the function raised), or a partial batch response naming a record that is not in
  the batch: the whole batch failed;
* ``{"batchItemFailures": [{"itemIdentifier": <sequence number>}, ...]}``: the records before
  the lowest failed one are done, the rest is retried from it (a record after a failed one is
  delivered again: the functions are idempotent).

What failed is split in two and each half retried on its own (``BisectBatchOnFunctionError``;
a split does not spend a retry), until the failing records are alone; a record that still fails
after ``max_retries`` retries (``MaximumRetryAttempts``) goes to the on-failure destination as an
invocation record with ``DDBStreamBatchInfo`` like Lambda's: an SQS queue on the embedded
endpoint (where the records are, not the records), or, for a mapping whose
``failure_destination`` is ``s3``, an object in a bucket there holding the invocation record and
the whole batch (``payload``), named as Lambda names it
(``aws/lambda/<mapping UUID>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>``). The records after
it are then processed: a poison record never blocks its shard.

A mapping starts at its ``starting_position``: ``LATEST`` (what is written from then on) or
``TRIM_HORIZON`` (everything the stream holds), as a new Lambda mapping does; stopped and started
again it resumes where it stopped (a mapping disabled and enabled again).

Not modelled: ``ParallelizationFactor`` (one batch at a time per shard), batching windows,
record age limits, shard splits (moto's stream has one shard). Reading the stream costs nothing
here or on AWS (Lambda's reads of a DynamoDB stream are not billed).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from leasefence.streams import kept
from leasefence.streams.filters import passes
from leasefence.streams.mappings import StreamMapping

#: Records one ``GetRecords`` asks for (DynamoDB Streams' maximum).
READ_LIMIT = 1000
#: With wake-ups on writes (an in-process reader): how often an idle stream is read anyway.
IDLE_READ_S = 1.0
#: With wake-ups: how long after the first write to an idle stream it is read. Never at the
#: writer's own instant (no mapping on AWS is that quick, and the writer's invocation may have
#: more to write); about when the 20-a-second polling read it before.
WAKE_DELAY_S = 0.05


@dataclass
class MappingStats:
    records_read: int = 0
    records_filtered_out: int = 0
    invocations: int = 0
    failed_invocations: int = 0
    records_to_destination: int = 0
    errors: list[str] = field(default_factory=list)


def lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """A ``GetRecords`` record as Lambda hands it to a function (creation time in epoch
    seconds, the stream's ARN added)."""
    body = dict(record["dynamodb"])
    created = body.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        body["ApproximateCreationDateTime"] = created.timestamp()
    elif isinstance(created, int):  # the wire JSON (a records reader): as botocore's datetime gives
        body["ApproximateCreationDateTime"] = float(created)
    shaped = {k: v for k, v in record.items() if k != "dynamodb"}
    shaped["dynamodb"] = body
    shaped["eventSourceARN"] = stream_arn
    return shaped


class EventSourceMapping:
    """One mapping polling the table's stream in a background thread (``start``/``stop``)."""

    def __init__(
        self,
        name: str,
        config: StreamMapping,
        table_name: str,
        clients: Any,
        invoker: Any,
        failure_queue_url: str | None,
        poll_interval_s: float = 0.05,
        timeout_ms: int = 300_000,
        failure_bucket: str | None = None,
        starting_position: str | None = None,
        reader: Any = None,
    ) -> None:
        """``config``: the mapping's settings (:mod:`leasefence.streams.mappings`; batch size,
        retries, bisect, filters, starting position and the kind of on-failure destination are
        honoured); ``clients(service)``: a boto3 client of the embedded endpoint; ``invoker``:
        the function's own :class:`~leasefence_tools.local.server.Invoker` (its execution
        environment); ``failure_queue_url`` / ``failure_bucket``: the on-failure destination
        (the bucket for a mapping whose ``failure_destination`` is ``s3``); ``timeout_ms``: the
        function's timeout (what ``context.get_remaining_time_in_millis`` counts down);
        ``starting_position``: instead of the config's; ``reader``: the embedded endpoint's
        in-process :class:`~leasefence_tools.local.embedded.RecordsReader` (``GetRecords`` as
        wire JSON, without botocore's parsing of every record, and a wake-up when records are
        written: the mapping then reads when the stream has something new, at most once per
        ``poll_interval_s``, instead of polling it every ``poll_interval_s``)."""
        self.name = name
        self.config = config
        self.table_name = table_name
        self.invoker = invoker
        self.failure_queue_url = failure_queue_url
        self.failure_bucket = failure_bucket
        self.starting_position = starting_position or config.starting_position
        if config.failure_destination == "s3" and not failure_bucket:
            raise ValueError(f"mapping {name}: its on-failure destination needs a bucket")
        if config.failure_destination != "s3" and not failure_queue_url:
            raise ValueError(f"mapping {name}: its on-failure destination needs a queue")
        #: Names the objects of an S3 on-failure destination, as a Lambda mapping's UUID does.
        self.uuid = str(uuid.uuid4())
        self.poll_interval_s = poll_interval_s
        self.timeout_ms = timeout_ms
        self.stats = MappingStats()
        self._streams = clients("dynamodbstreams")
        self._sqs = clients("sqs")
        self._s3 = clients("s3")
        self._ddb = clients("dynamodb")
        self._reader = reader
        #: Set by the reader when records are written (None: poll every ``poll_interval_s``).
        self._written: threading.Event | None = None
        #: Whether the last poll stopped at the read limit (more is waiting).
        self._full = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stream_arn = ""
        self._iterators: dict[str, str] = {}
        #: Per shard, the sequence number of the last record read: where a new iterator resumes.
        self._read_to: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> EventSourceMapping:
        """Start reading at the starting position (``LATEST``: the stream's tip, records written
        from now on; ``TRIM_HORIZON``: its oldest record), as a new mapping does; after
        :meth:`stop`, resume where it stopped (as a disabled mapping that is enabled again)."""
        self.open()
        self._stop.clear()
        if self._reader is not None and self._written is None:
            self._written = self._reader.written()
        self._thread = threading.Thread(target=self._run, name=f"esm-{self.name}", daemon=True)
        self._thread.start()
        return self

    def open(self) -> EventSourceMapping:
        """Take the starting position (once) without polling: :meth:`poll_once` then delivers
        synchronously (tests), or :meth:`start` polls in the background."""
        if not self._iterators:
            self.stream_arn = self._ddb.describe_table(TableName=self.table_name)["Table"][
                "LatestStreamArn"
            ]
            shards = self._streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"][
                "Shards"
            ]
            self._iterators = {
                shard["ShardId"]: self._streams.get_shard_iterator(
                    StreamArn=self.stream_arn,
                    ShardId=shard["ShardId"],
                    ShardIteratorType=self.starting_position,
                )["ShardIterator"]
                for shard in shards
            }
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None

    def stop(self) -> None:
        self._stop.set()
        if self._written is not None:
            self._written.set()  # out of its wait for records
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # ------------------------------------------------------------------ polling

    def _run(self) -> None:
        written = self._written
        while not self._stop.is_set():
            started = time.monotonic()
            if written is not None:
                written.clear()  # a record written from here on is read now or wakes the next
            try:
                busy = self.poll_once()
            except Exception as error:  # noqa: BLE001 - the mapping keeps polling, as Lambda's does
                self.stats.errors.append(f"{type(error).__name__}: {error}"[:300])
                sys.stderr.write(f"event source mapping {self.name}: {type(error).__name__}\n")
                busy = self._full = False
            if written is None:  # no wake-ups: poll again at once while records come
                if not busy:
                    self._stop.wait(self.poll_interval_s)
            elif not self._full:
                # Woken by writes: records written within one interval come in one read (Lambda
                # itself polls a shard four times a second); an idle stream is read once a second.
                self._stop.wait(max(0.0, self.poll_interval_s - (time.monotonic() - started)))
                if not written.is_set() and written.wait(IDLE_READ_S):
                    self._stop.wait(WAKE_DELAY_S)  # woken at the writer's instant: let it finish

    def poll_once(self) -> bool:
        """Read each shard once and deliver what passes the filters; True if records came."""
        came = False
        for shard, iterator in list(self._iterators.items()):
            try:
                answer = (
                    self._streams.get_records(ShardIterator=iterator, Limit=READ_LIMIT)
                    if self._reader is None
                    else self._reader.read(iterator, READ_LIMIT)
                )
            except Exception:
                # An iterator is used once; one whose answer was lost (the endpoint read it, the
                # client timed out and sent it again) or that expired is gone for good. Lambda's
                # mapping takes a new one after the last record it read: so does this one, and
                # the next poll goes on from there (nothing skipped, nothing read twice).
                self._iterators[shard] = self._resume_iterator(shard)
                raise
            self._iterators[shard] = answer["NextShardIterator"]
            raw = answer.get("Records", [])
            self._full = len(raw) >= READ_LIMIT
            if raw:
                self._read_to[shard] = raw[-1]["dynamodb"]["SequenceNumber"]
            records = [lambda_record(r, self.stream_arn) for r in raw]
            if not records:
                continue
            came = True
            self.stats.records_read += len(records)
            wanted = [r for r in records if passes(self.config.filters, r)]
            self.stats.records_filtered_out += len(records) - len(wanted)
            for start in range(0, len(wanted), self.config.batch_size):
                self.deliver(wanted[start : start + self.config.batch_size])
        return came

    def _resume_iterator(self, shard: str) -> str:
        """A new iterator of ``shard`` just after the last record read (at the starting position
        if none was read yet)."""
        where: dict[str, str] = (
            {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": self._read_to[shard]}
            if shard in self._read_to
            else {"ShardIteratorType": self.starting_position}
        )
        answer = self._streams.get_shard_iterator(StreamArn=self.stream_arn, ShardId=shard, **where)
        return str(answer["ShardIterator"])

    # ------------------------------------------------------------------ delivery

    def deliver(self, batch: list[dict[str, Any]]) -> None:
        """One batch, retried and bisected as described in the module docstring."""
        pending: deque[tuple[list[dict[str, Any]], int]] = deque([(batch, 0)])
        while pending:
            records, retries = pending.popleft()
            failed_at = self._invoke(records)
            if failed_at is None:
                continue
            rest = records[failed_at:]
            if self.config.bisect and len(rest) > 1:
                half = len(rest) // 2
                pending.extendleft([(rest[half:], retries), (rest[:half], retries)])
            elif retries < self.config.max_retries:
                pending.appendleft((rest, retries + 1))
            else:
                self._to_destination(rest, retries + 1)

    def _invoke(self, records: list[dict[str, Any]]) -> int | None:
        """Invoke once; the index of the first record to retry from, or None when all are done."""
        self.stats.invocations += 1
        try:
            answer = self.invoker.invoke(
                self.config.function, {"Records": records}, timeout_ms=self.timeout_ms
            )
        except Exception:  # noqa: BLE001 - a function error fails the whole batch, as in Lambda
            self.stats.failed_invocations += 1
            return 0
        failures = (answer or {}).get("batchItemFailures") if isinstance(answer, Mapping) else None
        if not failures:
            return None
        self.stats.failed_invocations += 1
        positions = {r["dynamodb"]["SequenceNumber"]: i for i, r in enumerate(records)}
        found = [
            positions.get(f.get("itemIdentifier")) if isinstance(f, Mapping) else None
            for f in failures
        ]
        return 0 if any(i is None for i in found) else min(found)  # type: ignore[type-var]

    def _to_destination(self, records: list[dict[str, Any]], attempts: int) -> None:
        """What Lambda sends to a stream mapping's on-failure destination: where the records
        are (the stream keeps them for 24 hours); to an S3 destination the records too."""
        moment = datetime.now(UTC)
        shard = next(iter(self._iterators), "")
        to_s3 = self.config.failure_destination == "s3"
        message = kept.invocation_record(
            records,
            function_arn=f"arn:aws:lambda:us-east-1:000000000000:function:leasefence-"
            f"{self.config.function}",
            attempts=attempts,
            shard=shard,
            stream_arn=self.stream_arn,
            moment=moment,
            with_records=to_s3,
        )
        if to_s3:
            self._s3.put_object(
                Bucket=self.failure_bucket,
                Key=kept.object_key(self.uuid, shard, moment),
                Body=json.dumps(message).encode(),
            )
        else:
            self._sqs.send_message(QueueUrl=self.failure_queue_url, MessageBody=json.dumps(message))
        self.stats.records_to_destination += len(records)
