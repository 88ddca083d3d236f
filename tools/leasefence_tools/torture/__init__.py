"""`leasefence torture`: many workers, four target classes, several tenants, and a fault injector.

Worker threads execute operations for several tenants (with colliding operation ids) against
instrumented targets of classes A to D, over the embedded stack, while faults are injected:

* ``stall``: a worker pauses past its lease just before the side effect, then carries on;
* ``crash``: a worker dies right after the side effect, before its completion write;
* ``lost_response`` / ``not_sent``: a store call commits and its answer is lost, or never arrives;
* ``throttle`` / ``txn_conflict``: DynamoDB throttling and transaction conflicts;
* ``ambiguous_call``: a class C or D call whose answer is lost;
* ``replay`` / ``conflict``: an enqueue repeated with the same payload, or with another one;
* ``sweep``: sweeper runs at random moments, concurrently with claims (parking expired final
  attempts, and purging payloads whose retention after their operation's end has passed);
* ``txn_throttle``: a transaction cancelled with throttling reasons, as DynamoDB reports it.

The embedded endpoint is as unkind as DynamoDB here (:class:`~leasefence_tools.local.embedded.Fidelity`):
index queries lag the table, and TTL deletes expired items. Payloads are stored inline in the
embedded S3 and every handler loads and checks its payload before its side effect.

The **composed run** (``Settings.compose``, on by default; :mod:`leasefence_tools.torture.compose`) puts
every feature on the same operations at once:

* a job-type catalogue declared over the API whose maximum leases cut what workers ask for
  (``email-c`` always, ``ledger-b`` while the operator has it cut: it flips it every two
  seconds, so claims with cut and uncut leases mix), and an approval-required type;
* HTTP workers (the worker runtime with :class:`~leasefence.worker.http_backend.HttpBackend`,
  over the API function run in this process) beside in-process workers, on the same operations
  (a takeover, a retry or a requeue moves an operation from one kind to the other); they ask
  for different leases; every other HTTP worker is a batched fleet (``Settings.batched_fleet``
  threads over one ``HttpBackend(batched=True)``: claims, renewals and closing writes in rounds,
  ``POST /v1/batch/work``), whose lifecycles the summary counts (``composed.batched``);
* enqueues over the API (some as an item of ``POST /v1/batch/enqueue``) and in-process, inline
  and by reference (the producers' own store);
* class B posts to shared accounts (its tenant's, and one every tenant's operations write,
  whose fence entries are pruned to the fewest allowed) besides its own ledger entry, and its
  holders stall more often (``b_stall_rate``);
* handlers that ask for a retry (``retry``: queued again after an attempt) and healthy long jobs
  that call ``progress`` (``slow``: they must keep their lease);
* producers cancelling operations, racing claims, retries and requeues (``cancel``);
* approvals racing cancels and the sweeper's expiry, approvers that try a wrong hash first,
  enqueuers that try to approve their own operation, tokens that name nobody, and producers that
  replace the bytes behind a reference before its approval comes (``swap_before_approval``);
* an operator who erases parked ``unknown`` operations and then requeues them
  (``erase_parked``, ``requeue``);
* lost HTTP answers on every command (``http_answer_lost``: claim, complete, fail, resolve,
  approve, cancel, erase, catalogue ``PUT``, the batches), sent again by the SDK or the caller;
* the publisher (history and events, on the table's stream through the local event source
  mapping) with failing history writes (``history_*``) and ``PutEvents`` calls
  (``event_refused``, ``event_answer_lost``).

**Indeterminate calls** (``Settings.indeterminate``, on by default;
:mod:`leasefence_tools.torture.indeterminate`): every enqueue, claim, complete and resolve, in
process and over HTTP, is recorded as ok, failed or indeterminate (no answer), a share of their
answers is lost on purpose (before the request ran or after it committed, unknown to the
client), and the checker accepts each operation's calls and history only if some resolution of
its indeterminate calls explains them.

Then the **months phase** (``Settings.months``): workers pause, a backlog is enqueued, and the clock
jumps 45 days (past the payload retention), then 300 more days (within the 400-day identity
retention) while operations are queued, parked or finished: old ``unknown`` operations are
requeued, finished ones replayed and conflicted, some finished and some queued operations erased
in the middle, payloads purged and TTL deletions run. Finally the clock jumps past the identity
retention and TTL deletes every ended identity (the window, measured).

Then a checker (:mod:`leasefence_tools.torture.checker`) reads the final table, the targets' own
records, and in a composed run every history and the events published. The seed fixes the
workload and every fault decision (each is a hash of the seed and of what it applies to, not a
draw from one sequence the threads share); thread interleaving still varies between runs, which
is the point of running it many times.

Time runs ``speed`` times faster than the wall clock for the engine (leases, backoff), so a
10 s lease lapses in one second and stalls stay cheap.

``python -m leasefence_tools.torture --help`` lists the switches (``--no-compose``,
``--no-claim-tokens``, ``--no-indeterminate``).
"""

from __future__ import annotations

from leasefence_tools.torture.run import main, run_torture
from leasefence_tools.torture.settings import Settings

__all__ = ["Settings", "main", "run_torture"]
