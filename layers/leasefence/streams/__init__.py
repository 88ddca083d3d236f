"""What the operations table's stream (DynamoDB Streams, new and old images) drives.

Every transition writes its name, its actor and ``seq`` + 1 on the operation item (one
conditional write, as always), so a stream record alone tells what happened. Two consumers read
the stream, each through a Lambda event source mapping with a filter (:mod:`.filters`, one
definition for the CDK app and the local stack):

* the worker function (``functions/worker``): records where work became claimable now (an
  enqueue, an immediate retry, an operator's requeue) are claimed by name and run
  (:mod:`leasefence.worker.dispatch`); the scheduled drain stays as the safety net;
* the publisher function (``functions/publisher``): every transition becomes a history entry
  (:mod:`leasefence.history`) and, where an upstream service cares, an outcome event on
  EventBridge (:mod:`.events`, schema in ``docs/events/``).

:mod:`.records` parses a record; :mod:`.publisher` is the publisher's logic.
"""
