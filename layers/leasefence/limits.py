"""Every contract limit and default of leasefence, in one table, units in the names.

Standard library only: the CDK app, the API's request models, the catalogue and the engine all
import this module (never the engine for a constant), so a limit cannot drift between them.
Units: ``_MS`` milliseconds, ``_SECONDS``, ``_DAYS``, ``_BYTES``, ``_LENGTH`` characters; a bare
``MAX_`` or ``DEFAULT_`` counts things.

Fences of one fence epoch lie in ``[epoch * FENCE_EPOCH_SPAN + 1, (epoch + 1) * FENCE_EPOCH_SPAN]``.
A point-in-time restore rolls the table's fences back, but not what class-B targets saw: restored
into a new table under the next epoch, every claim's fence starts above every fence handed out
before (the first claim of an operation in the new epoch jumps to the epoch's floor). No
operation is claimed a billion times, and fences stay below 2**53 (JSON-safe) up to the epoch
:data:`MAX_FENCE_EPOCH`.
"""

from __future__ import annotations

# ------------------------------------------------------------------ time

SECOND_MS = 1_000
DAY_MS = 86_400_000
DAY_SECONDS = 86_400

# ------------------------------------------------------------------ identifiers and text

#: Ids (tenant, operation, job type, worker, actor, tokens) and outcome codes: 1-256 characters,
#: no control characters (:mod:`leasefence.validation`).
MAX_ID_LENGTH = 256
#: Reasons, notes, payload references, catalogue owners and runbook URLs.
MAX_TEXT_LENGTH = 1024
MAX_REASON_LENGTH = MAX_TEXT_LENGTH
MAX_PAYLOAD_REF_LENGTH = MAX_TEXT_LENGTH

# ------------------------------------------------------------------ bytes, as DynamoDB counts them

#: UTF-8 takes at most this many bytes per character: the limits above in characters are these
#: many times larger in bytes, DynamoDB's measure (an id of 256 emoji is 1 KiB).
MAX_UTF8_BYTES_PER_CHAR = 4
MAX_ID_BYTES = MAX_UTF8_BYTES_PER_CHAR * MAX_ID_LENGTH
MAX_TEXT_BYTES = MAX_UTF8_BYTES_PER_CHAR * MAX_TEXT_LENGTH
#: DynamoDB's key limits (the table's and every index's): a partition key value, a sort key value.
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
#: DynamoDB refuses a write that would make an item larger than this.
MAX_STORE_ITEM_BYTES = 400 * 1024
#: An id (an actor, a worker id, an outcome code) as a history entry stores it: at most this many
#: bytes; a longer one is cut with a marker and a digest (:func:`leasefence.stored.stored_id`).
#: Every ASCII id and every id of at most 64 characters is stored whole.
MAX_ENTRY_ID_BYTES = 256
#: A reason or note as a history entry stores it: at most 256 characters and this many bytes
#: (whole characters: 256 characters of up to three bytes each fit).
MAX_ENTRY_TEXT_LENGTH = 256
MAX_ENTRY_TEXT_BYTES = 3 * MAX_ENTRY_TEXT_LENGTH

# ------------------------------------------------------------------ fences

#: The largest fence (and any integer the API accepts as one): JSON-safe.
MAX_FENCE = 2**53 - 1
FENCE_EPOCH_SPAN = 1_000_000_000
MAX_FENCE_EPOCH = MAX_FENCE // FENCE_EPOCH_SPAN - 1

# ------------------------------------------------------------------ attempts and retries

#: The largest attempt budget an operation (or a catalogue entry) may have.
MAX_ATTEMPTS = 100
#: The attempt budget when neither the request nor the catalogue names one (class D: 1).
DEFAULT_MAX_ATTEMPTS = 5
#: A retryable failure without a delay waits a uniform time up to
#: ``min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2**n)`` (full jitter; n: the claims so far).
BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 300_000
#: The longest delay a failing worker may ask for (``retry_after``).
MAX_RETRY_AFTER_MS = DAY_MS
MAX_RETRY_AFTER_SECONDS = MAX_RETRY_AFTER_MS // SECOND_MS

# ------------------------------------------------------------------ leases and claims

MIN_LEASE_MS = 1_000
#: A claim's lease when neither the claim nor its job type's catalogue entry names one.
DEFAULT_LEASE_MS = 60_000
MAX_LEASE_MS = 900_000
DEFAULT_LEASE_SECONDS = DEFAULT_LEASE_MS // SECOND_MS
MAX_LEASE_SECONDS = MAX_LEASE_MS // SECOND_MS
#: A claim names at most this many job types.
MAX_CLAIM_JOB_TYPES = 50
#: A claim gives up retrying a lost or throttled write after this long (ms of its own clock).
CLAIM_RETRY_BUDGET_MS = 5_000
#: Entries read per claim attempt from one due shard (one 0.5-unit read: they are small).
DEFAULT_CANDIDATE_PAGE = 24
#: Entries read per claim attempt while claimers race for this tenant's work (see
#: ``Claimer.page_for``): about 1 to 1.5 read units, against a collision rate that falls with
#: the page (32 claimers on one tenant: 0.25 refused claim writes per claim at 24, under 0.1 at 64).
DEFAULT_CONTENDED_PAGE = 64
#: How many claims of a tenant after its last lost race still read the contended page.
CONTENTION_MEMORY = 20
#: How many tenants (contention), live leases and registered job types an engine remembers at
#: most, each: the oldest are forgotten first.
MEMORY_ENTRIES = 10_000
#: The due spread (``engine._spread``): how long an engine trusts the (tenant, job type) spread
#: hint it read (ms). Each engine reads each hint at most once per period: at 10,000 lifecycles/s
#: that is one eventually consistent read per engine and second, whatever the rate.
SPREAD_CACHE_MS = 1_000
#: From this many due shards on, a job type new to its tenant's directory starts at one shard (its
#: hint item written with the directory entry): below it, a claim that probes every shard of a
#: type without a hint reads at most 3.5 units, not worth a write per new type.
SPREAD_START_SHARDS = 8
#: How long a claim trusts the hint it read (ms): a claimer's stale hint costs probes or a few
#: seconds' delay in seeing a raise, never an entry (enqueues, whose stale hint the grace
#: below must cover, trust it ``SPREAD_CACHE_MS``). As long as the catalogue's cache.
SPREAD_CLAIM_CACHE_MS = 5_000
#: After a spread falls, claimers still probe up to the spread before it for this long (ms), so
#: an enqueue that used a cached spread from before the change (at most ``SPREAD_CACHE_MS`` old)
#: is found by the next poll: longer than an idle worker's longest wait (20 s).
SPREAD_GRACE_MS = 60_000
#: A spread above 1 falls back to 1 once an engine's claim-nexts of that (tenant, job type) have
#: found nothing for this long (ms), and no change of the hint is younger than ``SPREAD_GRACE_MS``.
SPREAD_IDLE_MS = 60_000
#: Every engine that polls a (tenant, job type) probes every due shard, not only those below the
#: spread, at least once per this period (ms): the bound on how long a due entry in a shard at or
#: above the spread (an enqueue delayed past the grace) can wait. At 64 due shards it adds 32
#: read units per period to an idle worker's polls (about 1.6 per poll at one poll every 15 s).
SPREAD_FULL_PROBE_MS = 300_000
#: Lifecycles per second one engine sends to one due shard before it raises the spread (a due
#: shard holds about 200 a second: 1,000 write units at 4 per lifecycle, with headroom).
SPREAD_SHARD_RATE = 100
#: How long a claim-next marker (the operation a claim request with a client token is about to
#: claim) is kept.
CLAIM_MARKER_TTL_MS = DAY_MS

# ------------------------------------------------------------------ checkpoints, payloads, bodies

MAX_CHECKPOINT_BYTES = 4096
MAX_CHECKPOINT_DEPTH = 32
#: An inline payload's canonical JSON.
MAX_PAYLOAD_BYTES = 256 * 1024
#: An inline payload whose canonical JSON is at most this long is kept in DynamoDB (layout 1: the
#: operation's own item; layout 2: a payload item, packed when that is shorter); a longer one goes
#: to S3 unless it packs to this (:data:`MAX_PACKED_PAYLOAD_BYTES`). At
#: most 1 KiB, every write of the item costs at most one write unit more, whatever else the item
#: holds (ceil((x + 1024) / 1024) <= ceil(x / 1024) + 1): four writes carry it (enqueue, claim,
#: completion, purge; a heartbeat one more), $2.50 to $3.13 per million lifecycles at on-demand
#: prices, plus its storage for the payload retention, against $5.40 for S3's PUT and GET. A
#: larger payload can cost two units more per write, no cheaper than S3 (docs/performance.md).
MAX_ITEM_PAYLOAD_BYTES = 1024
#: Under layout 2 a payload item keeps what it stores (packed when that is shorter:
#: :func:`leasefence.payloads.pack`) up to :data:`MAX_ITEM_PAYLOAD_BYTES`: a payload whose
#: canonical JSON is longer but packs to that is kept packed too, up to this many bytes of
#: canonical JSON (what a reader unpacks at most). Its two writes cost one unit each where S3's
#: PUT and GET cost $5.40 per million and two requests on the job's path.
MAX_PACKED_PAYLOAD_BYTES = 8 * 1024
#: A job type's payload JSON Schema.
MAX_SCHEMA_BYTES = 16_384
#: Request bodies larger than this are refused with 413 (``LEASEFENCE_MAX_BODY_BYTES``).
DEFAULT_MAX_BODY_BYTES = 6 * 1024 * 1024
#: A batch request (``POST /v1/batch/...``) names 1 to this many operations, each its own
#: conditional write with its own answer: a claimed job's lease runs from its claim, and a batch
#: is written item after item, so the cap keeps the last item's wait (and the request's time in
#: the API function) short.
MAX_BATCH_ITEMS = 25
#: A bulk triage (``POST /v1/batch/triage``) names 1 to this many operations: an outage's parked
#: operations in one operator action, each its own read and conditional write (a few seconds at
#: most in the API function).
MAX_TRIAGE_ITEMS = 100
#: A claim batch begins no claim later than this after its request began (ms): the rest are
#: answered 503 without being made, so a batch of slow claims (many job types on an idle tenant)
#: stays well inside API Gateway's 29 s.
CLAIM_BATCH_BUDGET_MS = 5_000
#: A class-A completion carries 1 to this many business writes (one transaction of 100 actions).
MAX_BUSINESS_WRITES = 99

# ------------------------------------------------------------------ job types and catalogue

#: How many job types a tenant's directory holds at most. A claim without ``job_types`` reads the
#: directory (one eventually consistent read: 0.5 unit up to 4 KB, 100 types of 40 characters; at
#: most once per :data:`DIRECTORY_CACHE_MS` in one engine while its claims find work)
#: and queries each type's shards, so a directory that only grew would make every idle poll dearer
#: (and reach DynamoDB's 400 KB item limit after about 1,500 types of 256 characters).
MAX_JOB_TYPES = 100
#: How long an engine trusts what it read of a tenant's catalogue (ms of its clock).
CATALOGUE_CACHE_MS = 5_000
#: How long a claim without ``job_types`` trusts the tenant's directory an earlier one read (ms of
#: the engine's clock; only a directory that names a type). A search of those types that finds no
#: work reads it again before answering none, so a new job type waits at most this long for a
#: claim, and only while the types already known have work.
DIRECTORY_CACHE_MS = 5_000
#: How many tenants' directories one engine keeps at most (up to 100 types of 256 characters
#: each: about 30 MB at the worst); older reads go first, and those past their time on any read.
DIRECTORY_CACHE_ENTRIES = 1_000

# ------------------------------------------------------------------ the approval gate

#: How long an operation awaits its approval when the caller names no validity, and the longest
#: it may (an awaiting operation has no TTL: it must end by itself).
MIN_APPROVAL_VALID_MS = 1_000
DEFAULT_APPROVAL_VALID_MS = DAY_MS
MAX_APPROVAL_VALID_MS = 30 * DAY_MS
#: A catalogue entry's ``approval_valid_seconds``.
MIN_APPROVAL_VALID_SECONDS = 60
DEFAULT_APPROVAL_VALID_SECONDS = DEFAULT_APPROVAL_VALID_MS // SECOND_MS
MAX_APPROVAL_VALID_SECONDS = MAX_APPROVAL_VALID_MS // SECOND_MS

# ------------------------------------------------------------------ retention

DEFAULT_IDENTITY_RETENTION_DAYS = 400
DEFAULT_PAYLOAD_RETENTION_DAYS = 30
#: How long an ended operation's identity (id, payload hash, fences, state) is kept: within it a
#: replay is a replay and no fence of the operation is handed out again. None: forever.
DEFAULT_IDENTITY_RETENTION_MS: int | None = DEFAULT_IDENTITY_RETENTION_DAYS * DAY_MS
#: How long an ended operation's stored payload is kept after it ended.
DEFAULT_PAYLOAD_RETENTION_MS = DEFAULT_PAYLOAD_RETENTION_DAYS * DAY_MS
#: An ended operation's identity (its item, and the purge index entry with it) is kept at least
#: this long after its payload's purge time, whatever the identity retention: a sweeper that fell
#: this far behind still finds the payload to delete before DynamoDB's TTL deletes the item.
PURGE_BEFORE_TTL_MS = 7 * DAY_MS
#: After the identity retention became forever, the TTLs already set on ended identities are
#: cleared in passes over the table; a pass that started this long after the sweeper first saw
#: the switch is the last one: by then no function still configured with the old window (the
#: longest Lambda invocation is 15 minutes) can set another TTL.
RETENTION_SWITCH_GRACE_MS = 15 * 60_000
#: A tenant erasure deletes the tenant's catalogue, directory and hold only this long after it
#: held the tenant: longer than an engine trusts a catalogue read (5 s) plus an API request's
#: longest run (29 s), so no enqueue admitted without seeing the hold can commit after it.
TENANT_ERASURE_SETTLE_MS = 60_000

# ------------------------------------------------------------------ pages

#: Operations per page of a listing.
MAX_LIST_PAGE = 500
#: Entries one history keeps, and per page of it (the first, the enqueue, always stays).
MAX_HISTORY_ENTRIES = 50
#: The writes that start a loop of an operation (a claim, a takeover, an operator's requeue) need
#: the history in its item to hold fewer entries than this; one that finds it longer compacts it
#: first, in its own conditional write (:func:`leasefence.history.make_room`), so the list never
#: holds more than ``HISTORY_ROOM + 2`` entries (:func:`leasefence.item_budget.max_history_entries`),
#: with or without the stream's publisher (which compacts sooner, past ``MAX_HISTORY_ENTRIES + 10``).
HISTORY_ROOM = MAX_HISTORY_ENTRIES + 30
#: The history in the item is bounded in bytes too (``hb``: the list's size in DynamoDB's measure,
#: raised by each entry's own write): a claim, a takeover or a requeue needs it under this many
#: bytes, and compacts first otherwise, so ids and reasons of 4-byte characters cannot make the
#: item grow past :func:`leasefence.item_budget.max_item_bytes` (issue 32). Ordinary entries are
#: about 60 bytes: the count (:data:`HISTORY_ROOM`) binds first for them.
HISTORY_ROOM_BYTES = 16 * 1024
#: The publisher compacts a list past this many bytes (or :data:`MAX_HISTORY_ENTRIES` + 10
#: entries), sooner than the writers must.
HISTORY_COMPACT_AT_BYTES = 12 * 1024
#: A compaction keeps the first entry and the newest that fit in this many bytes (and at most
#: :data:`MAX_HISTORY_ENTRIES` in all).
HISTORY_KEEP_BYTES = 8 * 1024
#: Items per step of the bounded housekeeping calls (``clear_ttls``, ``erase_tenant``).
MAX_STEP_ITEMS = 1000
#: :meth:`Engine.oldest_parked_age_ms` reads at most this many pages of 10 per shard looking for
#: the oldest parked operation that is not a shadow tenant's.
PARKED_SCAN_PAGES = 5
