"""Watching outcome events locally, the way a consumer subscribes on AWS.

The local stack's publisher sends its events to an EventBridge bus on the embedded endpoint
(moto's EventBridge). A :class:`Subscription` is what a consumer deploys on AWS: a rule on the
bus with an event pattern (:func:`leasefence.streams.events.subscription_pattern`: one tenant,
some detail-types) and an SQS queue as its target; :meth:`Subscription.receive` reads the queue.
``leasefence events tail`` is one of these, removed again when it stops.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

#: The local stack's bus.
LOCAL_BUS = "leasefence-local"


class Subscription:
    """A rule and its queue on the embedded endpoint; ``close()`` (or ``with``) removes both."""

    def __init__(self, clients: Any, pattern: Mapping[str, Any], bus: str = LOCAL_BUS) -> None:
        """``clients(service)``: a boto3 client of the embedded endpoint."""
        self.bus = bus
        self.pattern = dict(pattern)
        self.name = f"leasefence-tail-{uuid.uuid4().hex[:12]}"
        self._events = clients("events")
        self._sqs = clients("sqs")
        self.queue_url = self._sqs.create_queue(QueueName=self.name)["QueueUrl"]
        queue_arn = self._sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self._events.put_rule(
            Name=self.name, EventBusName=bus, EventPattern=json.dumps(self.pattern)
        )
        self._events.put_targets(
            Rule=self.name, EventBusName=bus, Targets=[{"Id": "tail", "Arn": queue_arn}]
        )

    def receive(self, wait_s: float = 1.0, max_events: int = 10) -> list[dict[str, Any]]:
        """Events delivered since the last call (each the EventBridge event as a target gets it),
        waiting up to ``wait_s`` for the first. Short polls: the embedded endpoint serves one
        request at a time, so a long poll would hold it."""
        deadline = time.monotonic() + wait_s
        while True:
            answer = self._sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(max(max_events, 1), 10),
                WaitTimeSeconds=0,
            )
            messages = answer.get("Messages", [])
            if messages or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if messages:
            self._sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
        return [json.loads(m["Body"]) for m in messages]

    def close(self) -> None:
        try:
            self._events.remove_targets(Rule=self.name, EventBusName=self.bus, Ids=["tail"])
            self._events.delete_rule(Name=self.name, EventBusName=self.bus)
        finally:
            self._sqs.delete_queue(QueueUrl=self.queue_url)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
