"""The local event source mappings read the embedded endpoint's stream in process: they wake up
when records are written (no idle polling) and read what one interval wrote in one go."""

from __future__ import annotations

import threading
import time
import uuid

from leasefence.streams.mappings import StreamMapping
from leasefence_tools.local import streams
from leasefence_tools.local.embedded import EmbeddedAws


class _Recorder:
    """The function's execution environment: records each batch's keys."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.arrived = threading.Event()

    def invoke(self, name, event, timeout_ms=None):  # noqa: ARG002 - the Invoker's signature
        self.batches.append([r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"]])
        self.arrived.set()
        return {"batchItemFailures": []}


def _mapping(aws, recorder, interval_s):
    ddb, table = aws.client(), f"woken-{uuid.uuid4().hex[:8]}"  # endpoints in one process share tables
    ddb.create_table(
        TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    config = StreamMapping(function="recorder", filters=[{"eventName": ["INSERT"]}], batch_size=100)
    mapping = streams.EventSourceMapping(
        "recorder", config, table, aws.client, recorder, "unused-queue",
        poll_interval_s=interval_s, reader=aws.records_reader(),
    )
    return ddb, table, mapping


def test_a_write_wakes_the_mapping_and_an_idle_stream_is_not_polled(monkeypatch):
    monkeypatch.setattr(streams, "IDLE_READ_S", 60.0)  # only a wake-up can deliver in time
    recorder = _Recorder()
    with EmbeddedAws() as aws:
        ddb, table, mapping = _mapping(aws, recorder, interval_s=0.01)
        reads: list[str] = []
        read = mapping._reader.read
        mapping._reader.read = lambda iterator, limit: reads.append(iterator) or read(iterator, limit)
        mapping.start()
        try:
            time.sleep(0.5)
            assert len(reads) <= 2  # the first read, maybe one more: no polling of an idle stream
            ddb.put_item(TableName=table, Item={"pk": {"S": "a"}})
            assert recorder.arrived.wait(10), "the write did not wake the mapping"
            assert recorder.batches == [["a"]]
        finally:
            mapping.stop()
    assert not mapping.running


def test_records_written_within_one_interval_come_in_one_batch():
    recorder = _Recorder()
    with EmbeddedAws() as aws:
        ddb, table, mapping = _mapping(aws, recorder, interval_s=1.0)
        mapping.start()
        try:
            ddb.put_item(TableName=table, Item={"pk": {"S": "first"}})
            assert recorder.arrived.wait(10)
            recorder.arrived.clear()
            for key in ("b", "c", "d"):  # within the second after the first read
                ddb.put_item(TableName=table, Item={"pk": {"S": key}})
            assert recorder.arrived.wait(10)
            assert recorder.batches == [["first"], ["b", "c", "d"]]
        finally:
            mapping.stop()
