"""A tenant's job-type catalogue: one versioned entry per job type, and the tenant's strict mode.

An entry declares what every operation of its job type runs under: the target class, the attempt
budget, the default and maximum lease, the owner, the runbook, whether approval is required (and
for how long one stays valid), and optionally a JSON Schema for inline payloads. Entries are items
in the operations table (sort key :func:`keys.catalogue_id`; settings :data:`keys.SETTINGS_ID`),
in no index. Every write is ONE conditional ``UpdateItem``: the version check is inside the write,
and a refusal returns the item as it is (``ALL_OLD``), so the loser learns why without a read.

* ``put``: creates or replaces an entry; the version rises by one. Writing what is already there
  changes nothing (the write's condition compares a fingerprint of the declared fields, so the
  same declaration twice is one version). ``expected_version`` (optional) makes it a
  compare-and-set: another writer's change in between is 409 ``version_conflict``.
* ``delete``: a tombstone (``deleted_at``), not a deletion: the version keeps rising, so an entry
  declared again later never reuses a version an operation recorded.
* :meth:`Catalogue.admit`: what an enqueue of a job type runs under (:class:`Admission`), or a
  refusal: 422 ``unknown_job_type`` (strict tenant, uncatalogued type), 422 ``invalid_request``
  (a request that contradicts the entry, a payload that fails its schema).

Reads for enqueues are eventually consistent and cached per engine for :data:`CACHE_MS`: an
entry's change reaches every engine within that time (plus the read's own lag, well under a
second); each operation records the ``job_type_version`` it was admitted under, so which version
applied is never a guess. Writes made through an engine update its own cache at once.
"""

from leasefence.catalogue._catalogue import CACHE_MS, ERASING, Catalogue
from leasefence.catalogue._entries import (
    DEFAULT_APPROVAL_VALID_SECONDS,
    DEFAULT_ATTEMPTS,
    DEFAULT_LEASE_SECONDS,
    FIELDS,
    MAX_APPROVAL_VALID_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_SCHEMA_BYTES,
    MAX_SUMMARY_FIELDS,
    MAX_TEXT,
    RUNBOOK_URL_PATTERN,
    Admission,
    Change,
    JobTypeEntry,
    JobTypeSpec,
    compile_schema,
    parse_document,
    plan,
)
from leasefence.errors import (
    IdentityRequired,
    InlinePayloadRequired,
    InvalidInput,
    NotFound,
    TenantErasing,
    UnknownJobType,
    VersionConflict,
)

__all__ = [
    "CACHE_MS",
    "DEFAULT_APPROVAL_VALID_SECONDS",
    "DEFAULT_ATTEMPTS",
    "DEFAULT_LEASE_SECONDS",
    "ERASING",
    "FIELDS",
    "MAX_APPROVAL_VALID_SECONDS",
    "MAX_LEASE_SECONDS",
    "MAX_SCHEMA_BYTES",
    "MAX_SUMMARY_FIELDS",
    "MAX_TEXT",
    "RUNBOOK_URL_PATTERN",
    "Admission",
    "Catalogue",
    "Change",
    "IdentityRequired",
    "InlinePayloadRequired",
    "InvalidInput",
    "JobTypeEntry",
    "JobTypeSpec",
    "NotFound",
    "TenantErasing",
    "UnknownJobType",
    "VersionConflict",
    "compile_schema",
    "parse_document",
    "plan",
]
