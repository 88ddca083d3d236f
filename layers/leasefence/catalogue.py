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

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leasefence import keys, payload_schemas
from leasefence.clock import to_rfc3339
from leasefence.errors import (
    IdentityRequired,
    InlinePayloadRequired,
    InvalidInput,
    NotFound,
    TenantErasing,
    UnknownJobType,
    VersionConflict,
)
from leasefence.model import TargetClass
from leasefence.store import ConditionFailed, Store

#: How long an engine trusts what it read of a tenant's catalogue (ms of its clock).
CACHE_MS = 5_000
#: The attribute a tenant erasure sets on the tenant's settings item and catalogue entries (its
#: start, ms): an admission that reads either refuses the enqueue (409 ``tenant_erasing``).
ERASING = "tenant_erasing"
MAX_SCHEMA_BYTES = payload_schemas.MAX_SCHEMA_BYTES
MAX_TEXT = 1024
DEFAULT_ATTEMPTS = 5
DEFAULT_LEASE_SECONDS = 60
MAX_LEASE_SECONDS = 900
DEFAULT_APPROVAL_VALID_SECONDS = 86_400
MAX_APPROVAL_VALID_SECONDS = 30 * 86_400

#: The declared fields of an entry, in the order files, diffs and answers show them.
FIELDS = (
    "target_class",
    "max_attempts",
    "lease_seconds",
    "max_lease_seconds",
    "owner",
    "runbook_url",
    "approval_required",
    "approval_valid_seconds",
    "payload_schema",
)


def _int(spec: Mapping[str, Any], name: str, default: int | None, low: int, high: int) -> int:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be an integer from {low} to {high}")
    return value


def _text(spec: Mapping[str, Any], name: str) -> str | None:
    value = spec.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TEXT:
        raise InvalidInput(f"{name} must be a string of 1-{MAX_TEXT} characters")
    return value


#: What a runbook_url must be (the API's schema states the same pattern): http:// or https://,
#: a host (an IPv6 literal in brackets), then optionally a path, query or fragment; no whitespace
#: or control characters anywhere.
RUNBOOK_URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://(?:[^\x00-\x20\x7f-\x9f/?#\[\]]|\[[0-9A-Fa-f:.]+\])+"
    r"(?:[/?#][^\x00-\x20\x7f-\x9f]*)?$"
)
_RUNBOOK_URL = re.compile(RUNBOOK_URL_PATTERN)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compile_schema(schema: Any) -> Callable[[Any], Any]:
    """A validator for ``schema``: see :mod:`leasefence.payload_schemas` (patterns checked here
    and evaluated in linear time, remote ``$ref`` s refused, never fetched)."""
    return payload_schemas.compile_schema(schema)


def _refusing(message: str) -> Callable[[Any], Any]:
    """The validator of a stored schema that no longer compiles (declared before leasefence
    checked patterns): every payload is refused with why, until the entry is declared again."""

    def refuse(_payload: Any) -> Any:
        raise InvalidInput(f"the job type's payload_schema cannot be used: {message}")

    return refuse


@dataclass(frozen=True)
class JobTypeSpec:
    """The declared fields of an entry, validated and with defaults filled in."""

    target_class: TargetClass
    max_attempts: int
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    max_lease_seconds: int = MAX_LEASE_SECONDS
    owner: str | None = None
    runbook_url: str | None = None
    approval_required: bool = False
    approval_valid_seconds: int | None = None
    payload_schema: dict[str, Any] | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> JobTypeSpec:
        if not isinstance(spec, Mapping):
            raise InvalidInput("a job type entry must be an object")
        unknown = sorted(set(spec) - set(FIELDS))
        if unknown:
            raise InvalidInput(f"unknown fields in a job type entry: {', '.join(unknown)}")
        try:
            target = TargetClass(str(spec.get("target_class")))
        except ValueError:
            raise InvalidInput("target_class is required: one of A, B, C, D") from None
        attempts = _int(
            spec, "max_attempts", 1 if target is TargetClass.D else DEFAULT_ATTEMPTS, 1, 100
        )
        if target is TargetClass.D and attempts != 1:
            raise InvalidInput("target_class D allows exactly one attempt (max_attempts 1)")
        lease = _int(spec, "lease_seconds", DEFAULT_LEASE_SECONDS, 1, MAX_LEASE_SECONDS)
        max_lease = _int(spec, "max_lease_seconds", MAX_LEASE_SECONDS, 1, MAX_LEASE_SECONDS)
        if lease > max_lease:
            raise InvalidInput("lease_seconds must not exceed max_lease_seconds")
        runbook = _text(spec, "runbook_url")
        if runbook is not None and not _RUNBOOK_URL.fullmatch(runbook):
            raise InvalidInput("runbook_url must be an http(s) URL")
        approval = spec.get("approval_required", False)
        if not isinstance(approval, bool):
            raise InvalidInput("approval_required must be true or false")
        valid: int | None = None
        if approval:
            valid = _int(
                spec,
                "approval_valid_seconds",
                DEFAULT_APPROVAL_VALID_SECONDS,
                60,
                MAX_APPROVAL_VALID_SECONDS,
            )
        elif spec.get("approval_valid_seconds") is not None:
            raise InvalidInput("approval_valid_seconds needs approval_required: true")
        schema = spec.get("payload_schema")
        if schema is not None:
            compile_schema(schema)
        return cls(
            target_class=target,
            max_attempts=attempts,
            lease_seconds=lease,
            max_lease_seconds=max_lease,
            owner=_text(spec, "owner"),
            runbook_url=runbook,
            approval_required=approval,
            approval_valid_seconds=valid,
            payload_schema=schema,
        )

    def to_public(self) -> dict[str, Any]:
        return {
            "target_class": self.target_class.value,
            "max_attempts": self.max_attempts,
            "lease_seconds": self.lease_seconds,
            "max_lease_seconds": self.max_lease_seconds,
            "owner": self.owner,
            "runbook_url": self.runbook_url,
            "approval_required": self.approval_required,
            "approval_valid_seconds": self.approval_valid_seconds,
            "payload_schema": self.payload_schema,
        }

    @property
    def fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(_canonical(self.to_public()).encode()).hexdigest()


@dataclass(frozen=True)
class JobTypeEntry:
    job_type: str
    version: int
    spec: JobTypeSpec
    updated_at: int
    updated_by: str | None = None
    deleted_at: int | None = None

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> JobTypeEntry:
        schema = item.get("payload_schema")
        spec = JobTypeSpec(
            target_class=TargetClass(item["target_class"]),
            max_attempts=int(item["max_attempts"]),
            lease_seconds=int(item["lease_default_ms"]) // 1000,
            max_lease_seconds=int(item["lease_max_ms"]) // 1000,
            owner=item.get("owner"),
            runbook_url=item.get("runbook_url"),
            approval_required=bool(item.get("approval_required", False)),
            approval_valid_seconds=(
                None
                if item.get("approval_valid_ms") is None
                else int(item["approval_valid_ms"]) // 1000
            ),
            payload_schema=None if schema is None else json.loads(schema),
        )
        return cls(
            job_type=item["job_type"],
            version=int(item["version"]),
            spec=spec,
            updated_at=int(item["updated_at"]),
            updated_by=item.get("updated_by"),
            deleted_at=None if item.get("deleted_at") is None else int(item["deleted_at"]),
        )

    def to_public(self) -> dict[str, Any]:
        return {
            "job_type": self.job_type,
            "version": self.version,
            **self.spec.to_public(),
            "updated_at": to_rfc3339(self.updated_at),
            "updated_by": self.updated_by,
        }


@dataclass(frozen=True)
class Admission:
    """What one enqueue runs under: the entry's class, budget, lease bounds and approval (or the
    request's own class and budget for an uncatalogued type in a non-strict tenant)."""

    tenant_id: str
    job_type: str
    target_class: TargetClass
    max_attempts: int
    job_type_version: int | None = None
    lease_default_ms: int | None = None
    lease_max_ms: int | None = None
    approval_required: bool = False
    approval_valid_ms: int | None = None


@dataclass(frozen=True)
class Change:
    """One line of a catalogue plan: ``added``, ``changed`` (with ``fields``: name -> (old, new))
    or ``removed``."""

    kind: str
    job_type: str
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    spec: JobTypeSpec | None = None

    def describe(self) -> list[str]:
        sign = {"added": "+", "changed": "~", "removed": "-"}[self.kind]
        lines = [f"{sign} {self.job_type} ({self.kind})"]
        for name, (old, new) in self.fields.items():
            lines.append(f"    {name}: {_canonical(old)} -> {_canonical(new)}")
        return lines

    def to_public(self) -> dict[str, Any]:
        return {
            "change": self.kind,
            "job_type": self.job_type,
            "fields": {k: {"from": o, "to": n} for k, (o, n) in self.fields.items()},
        }


def parse_document(document: Any) -> tuple[dict[str, JobTypeSpec], bool | None]:
    """A catalogue file's content: ``{"job_types": {name: entry, ...}, "strict_job_types": bool}``
    (``strict_job_types`` optional: absent leaves the tenant's setting alone)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("job_types", {}), Mapping):
        raise InvalidInput("a catalogue is an object with a job_types object (name -> entry)")
    unknown = sorted(set(document) - {"job_types", "strict_job_types"})
    if unknown:
        raise InvalidInput(f"unknown top-level fields in the catalogue: {', '.join(unknown)}")
    strict = document.get("strict_job_types")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidInput("strict_job_types must be true or false")
    specs: dict[str, JobTypeSpec] = {}
    for name, spec in (document.get("job_types") or {}).items():
        _job_type(name)
        try:
            specs[name] = JobTypeSpec.parse(spec or {})
        except InvalidInput as error:
            raise InvalidInput(f"job type {name!r}: {error.message}") from None
    return specs, strict


def plan(
    current: Mapping[str, JobTypeSpec], desired: Mapping[str, JobTypeSpec], prune: bool = True
) -> list[Change]:
    """What turns ``current`` into ``desired``, field by field; nothing when they are equal.
    ``prune``: entries missing from ``desired`` are removed (a file is the whole catalogue)."""
    changes = []
    for name in sorted(set(current) | set(desired)):
        old, new = current.get(name), desired.get(name)
        if new is None:
            if prune and old is not None:
                changes.append(Change("removed", name))
        elif old is None:
            changes.append(
                Change(
                    "added",
                    name,
                    {k: (None, v) for k, v in new.to_public().items() if v is not None},
                    new,
                )
            )
        elif old != new:
            before, after = old.to_public(), new.to_public()
            diff = {k: (before[k], after[k]) for k in FIELDS if before[k] != after[k]}
            changes.append(Change("changed", name, diff, new))
    return changes


def _job_type_token(value: Any) -> str:
    from leasefence.engine import validate_id

    return validate_id("request_token", value)


def _job_type(value: Any) -> str:
    from leasefence.engine import validate_id

    return validate_id("job_type", value)


@dataclass
class _Cached:
    at: int
    value: Any


class Catalogue:
    """The catalogue of every tenant of one table, read and written through one :class:`Store`."""

    def __init__(self, store: Store, clock: Callable[[], int], cache_ms: int = CACHE_MS) -> None:
        self.store = store
        self.clock = clock
        self.cache_ms = cache_ms
        self._lock = threading.Lock()
        #: (tenant, job type) -> (entry or None, its validator or None); tenant -> strict.
        self._entries: dict[tuple[str, str], _Cached] = {}
        self._strict: dict[str, _Cached] = {}
        #: tenant -> when an erasure of it started, as last read on its settings or an entry.
        self._erasing: dict[str, _Cached] = {}

    # ------------------------------------------------------------------ reads

    def get(self, tenant_id: str, job_type: str) -> JobTypeEntry:
        entry = self._read(tenant_id, _job_type(job_type), consistent=True)
        if entry is None or entry.deleted_at is not None:
            raise NotFound("job type not in the catalogue")
        return entry

    def list(self, tenant_id: str) -> list[JobTypeEntry]:
        entries, start = [], None
        while True:
            page = self.store.query(
                KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
                values={":t": tenant_id, ":p": keys.CATALOGUE_PREFIX},
                ConsistentRead=True,
                start=start,
            )
            entries += [JobTypeEntry.from_item(i) for i in page.items if "deleted_at" not in i]
            if page.last_key is None:
                return entries
            start = page.last_key

    def strict(self, tenant_id: str, consistent: bool = True) -> bool:
        item = self.store.get(
            {"tenant_id": tenant_id, "operation_id": keys.SETTINGS_ID}, consistent=consistent
        )
        self._note_erasing(tenant_id, item)
        return bool((item or {}).get("strict_job_types", False))

    def _read(self, tenant_id: str, job_type: str, consistent: bool) -> JobTypeEntry | None:
        item = self.store.get(
            {"tenant_id": tenant_id, "operation_id": keys.catalogue_id(job_type)},
            consistent=consistent,
        )
        self._note_erasing(tenant_id, item)
        return None if item is None else JobTypeEntry.from_item(item)

    def _note_erasing(self, tenant_id: str, item: Mapping[str, Any] | None) -> None:
        if item is not None and item.get(ERASING) is not None:
            with self._lock:
                self._erasing[tenant_id] = _Cached(self.clock(), int(item[ERASING]))
                while len(self._erasing) > 10_000:
                    self._erasing.pop(next(iter(self._erasing)))

    def hold(self, tenant_id: str, since: int) -> int:
        """Mark the tenant's catalogue entries as erasing (each one conditional update of an
        entry that exists and is not marked yet), so an admission of a catalogued type refuses as
        one of an uncatalogued type does (which reads the settings item the erasure marked
        first). Returns how many entries it marked. Entries declared while the erasure runs are
        marked by its next step."""
        marked, start = 0, None
        while True:
            page = self.store.query(
                KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
                FilterExpression="attribute_not_exists(#erasing)",
                ExpressionAttributeNames={"#erasing": ERASING},
                values={":t": tenant_id, ":p": keys.CATALOGUE_PREFIX},
                ConsistentRead=True,
                start=start,
            )
            for item in page.items:
                with contextlib.suppress(ConditionFailed):  # deleted or marked meanwhile
                    self.store.update(
                        {"tenant_id": tenant_id, "operation_id": item["operation_id"]},
                        "SET #erasing = :since",
                        "attribute_exists(#v) AND attribute_not_exists(#erasing)",
                        {"#erasing": ERASING, "#v": "version"},
                        {":since": since},
                        returns="NONE",
                    )
                    marked += 1
            if page.last_key is None:
                return marked
            start = page.last_key

    # ------------------------------------------------------------------ writes

    def put(
        self,
        tenant_id: str,
        job_type: str,
        spec: JobTypeSpec | Mapping[str, Any],
        expected_version: int | None = None,
        actor: str | None = None,
        request_token: str | None = None,
    ) -> tuple[JobTypeEntry, bool]:
        """Create or replace an entry: one conditional update. Returns the entry and whether it
        changed (declaring what is already there is no write and no new version).

        A declaration sent again after its answer was lost tells the truth about ``changed``:
        with ``request_token`` (the caller's name for this declaration, recorded with the write,
        and the write's condition refuses it while the entry carries it), a refusal whose item
        carries that token is this request's own change: ``changed`` True. With ``expected_version``,
        ``changed`` is relative to the version the caller based it on: the entry says exactly
        this, at a later version, so it changed since then. With neither, an entry that already
        says exactly this is ``changed`` False."""
        job_type = _job_type(job_type)
        if request_token is not None:
            _job_type_token(request_token)
        if not isinstance(spec, JobTypeSpec):
            spec = JobTypeSpec.parse(spec)
        now = self.clock()
        attrs: dict[str, Any] = {
            "job_type": job_type,
            "target_class": spec.target_class.value,
            "max_attempts": spec.max_attempts,
            "lease_default_ms": spec.lease_seconds * 1000,
            "lease_max_ms": spec.max_lease_seconds * 1000,
            "owner": spec.owner,
            "runbook_url": spec.runbook_url,
            "approval_required": spec.approval_required,
            "approval_valid_ms": None
            if spec.approval_valid_seconds is None
            else spec.approval_valid_seconds * 1000,
            "payload_schema": None
            if spec.payload_schema is None
            else _canonical(spec.payload_schema),
            "fingerprint": spec.fingerprint,
            "updated_at": now,
            "updated_by": actor,
            "put_token": request_token,
        }
        names = {"#v": "version", "#fp": "fingerprint", "#del": "deleted_at"}
        values: dict[str, Any] = {":zero": 0, ":one": 1, ":fp": spec.fingerprint}
        sets, removes = ["#v = if_not_exists(#v, :zero) + :one"], ["#del"]
        for i, (name, value) in enumerate(attrs.items()):
            names[f"#a{i}"] = name
            if value is None:
                removes.append(f"#a{i}")
            else:
                values[f":a{i}"] = value
                sets.append(f"#a{i} = :a{i}")
        # "Something to change" is inside the write: absent, deleted, or declared differently.
        condition = "(attribute_not_exists(#fp) OR attribute_exists(#del) OR #fp <> :fp)"
        if request_token is not None:
            # The same request never writes twice (a late retry finds its own token).
            names["#tok"] = "put_token"
            values[":tok"] = request_token
            condition += " AND (attribute_not_exists(#tok) OR #tok <> :tok)"
        if expected_version == 0:
            condition += " AND attribute_not_exists(#v)"
        elif expected_version is not None:
            values[":expected"] = expected_version
            condition += " AND #v = :expected"
        try:
            item = self.store.update(
                self._key(tenant_id, job_type),
                f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                condition,
                names,
                values,
            )
        except ConditionFailed as refused:
            current = refused.item
            if (
                current is not None
                and request_token is not None
                and current.get("put_token") == request_token
            ):
                # This request's own write, answered again: it changed the entry.
                entry = JobTypeEntry.from_item(current)
                self._remember(tenant_id, job_type, entry)
                return entry, True
            if (
                current is not None
                and "deleted_at" not in current
                and current.get("fingerprint") == spec.fingerprint
            ):
                entry = JobTypeEntry.from_item(current)
                self._remember(tenant_id, job_type, entry)
                # It says exactly this: unchanged, unless the caller based it on an older version.
                changed = expected_version is not None and entry.version != expected_version
                return entry, changed
            raise VersionConflict(
                f"job type {job_type!r} is at version "
                f"{int(current['version']) if current else 0}, not {expected_version}"
            ) from None
        assert item is not None
        entry = JobTypeEntry.from_item(item)
        self._remember(tenant_id, job_type, entry)
        return entry, True

    def delete(
        self,
        tenant_id: str,
        job_type: str,
        expected_version: int | None = None,
        actor: str | None = None,
    ) -> JobTypeEntry:
        """Tombstone an entry (its version rises; a later ``put`` continues from there)."""
        job_type = _job_type(job_type)
        now = self.clock()
        names = {"#v": "version", "#del": "deleted_at", "#at": "updated_at", "#by": "updated_by"}
        values: dict[str, Any] = {":one": 1, ":now": now}
        names["#tok"] = "put_token"
        update = "SET #del = :now, #at = :now, #v = #v + :one"
        if actor is not None:
            values[":by"] = actor
            update += ", #by = :by REMOVE #tok"
        else:
            update += " REMOVE #by, #tok"
        condition = "attribute_exists(#v) AND attribute_not_exists(#del)"
        if expected_version is not None:
            values[":expected"] = expected_version
            condition += " AND #v = :expected"
        try:
            item = self.store.update(
                self._key(tenant_id, job_type), update, condition, names, values
            )
        except ConditionFailed as refused:
            current = refused.item
            if current is None or "deleted_at" in current:
                raise NotFound("job type not in the catalogue") from None
            raise VersionConflict(
                f"job type {job_type!r} is at version {int(current['version'])}, not {expected_version}"
            ) from None
        assert item is not None
        entry = JobTypeEntry.from_item(item)
        self._remember(tenant_id, job_type, None)
        return entry

    def set_strict(self, tenant_id: str, strict: bool, actor: str | None = None) -> bool:
        """Switch the tenant's strict mode (one idempotent update)."""
        if not isinstance(strict, bool):
            raise InvalidInput("strict_job_types must be true or false")
        names = {"#s": "strict_job_types", "#at": "updated_at", "#by": "updated_by"}
        values: dict[str, Any] = {":s": strict, ":now": self.clock()}
        update = "SET #s = :s, #at = :now" + (", #by = :by" if actor else " REMOVE #by")
        if actor:
            values[":by"] = actor
        with contextlib.suppress(ConditionFailed):  # refused: it is already so
            self.store.update(
                {"tenant_id": tenant_id, "operation_id": keys.SETTINGS_ID},
                update,
                "attribute_not_exists(#s) OR #s <> :s",
                names,
                values,
                returns="NONE",
            )
        with self._lock:
            self._strict[tenant_id] = _Cached(self.clock(), strict)
        return strict

    def apply(
        self,
        tenant_id: str,
        document: Any,
        prune: bool = True,
        dry_run: bool = False,
        actor: str | None = None,
    ) -> tuple[builtins.list[Change], bool | None]:
        """Make the catalogue what ``document`` declares (see :func:`parse_document`); returns the
        changes (made, or that would be made with ``dry_run``) and the strict setting to apply
        (None: unchanged). Idempotent: a second apply finds nothing to change and writes nothing."""
        desired, strict = parse_document(document)
        current = {e.job_type: e.spec for e in self.list(tenant_id)}
        changes = plan(current, desired, prune=prune)
        if strict is not None and strict == self.strict(tenant_id):
            strict = None
        if dry_run:
            return changes, strict
        for change in changes:
            if change.kind == "removed":
                self.delete(tenant_id, change.job_type, actor=actor)
            else:
                assert change.spec is not None
                self.put(tenant_id, change.job_type, change.spec, actor=actor)
        if strict is not None:
            self.set_strict(tenant_id, strict, actor=actor)
        return changes, strict

    # ------------------------------------------------------------------ enqueue

    def admit(
        self,
        tenant_id: str,
        job_type: str,
        target_class: TargetClass | str | None = None,
        max_attempts: int | None = None,
        payload: Any = None,
        payload_given: bool = False,
        inline: bool | None = None,
        identified: bool | None = None,
    ) -> Admission:
        """What an enqueue runs under, or why it is refused (nothing is written either way).

        An uncatalogued type: refused in a strict tenant, else the request's own class (default C)
        and budget, exactly as without a catalogue. A catalogued type: the entry's class and
        budget; an explicit ``target_class`` or ``max_attempts`` that differs is 422; with a
        ``payload_schema``, the payload must be given inline (``payload_given``) and valid.

        An entry that requires approval refuses a payload by reference
        (:class:`InlinePayloadRequired`: ``inline``, default ``payload_given``, says whether
        leasefence stores it) and an enqueuer that names nobody (:class:`IdentityRequired`, when
        ``identified`` is False): the approver approves bytes leasefence holds, and the enqueuer
        is on record so that it cannot approve its own operation.

        A tenant being erased (its settings item, or the entry, says so as last read: within
        :data:`CACHE_MS` of the erasure's start) is refused: :class:`TenantErasing` (409)."""
        found = self._cached_entry(tenant_id, job_type)
        strict = self._cached_strict(tenant_id) if found is None else False
        with self._lock:
            erasing = self._erasing.get(tenant_id)
        if self._fresh(erasing):
            raise TenantErasing(
                "this tenant is being erased: nothing new is accepted until the erasure finished"
            )
        if found is None:
            if strict:
                raise UnknownJobType(
                    f"job type {job_type!r} is not in this tenant's catalogue (strict mode)"
                )
            try:
                target = TargetClass(target_class if target_class is not None else TargetClass.C)
            except ValueError as error:
                raise InvalidInput("target_class must be one of A, B, C, D") from error
            if max_attempts is None:
                max_attempts = 1 if target is TargetClass.D else DEFAULT_ATTEMPTS
            return Admission(tenant_id, job_type, target, max_attempts)
        entry, validator = found
        spec = entry.spec
        if target_class is not None and str(target_class) != spec.target_class.value:
            raise InvalidInput(
                f"target_class {target_class} contradicts the catalogue: job type {job_type!r} "
                f"is class {spec.target_class.value} (version {entry.version}); omit target_class"
            )
        if max_attempts is not None and max_attempts != spec.max_attempts:
            raise InvalidInput(
                f"max_attempts {max_attempts} contradicts the catalogue: job type {job_type!r} "
                f"allows {spec.max_attempts} (version {entry.version}); omit max_attempts"
            )
        if spec.approval_required:
            if not (payload_given if inline is None else inline):
                raise InlinePayloadRequired(
                    f"job type {job_type!r} requires approval: send the payload inline (an "
                    "approval binds the bytes leasefence stores, which the approver can read)"
                )
            if identified is False:
                raise IdentityRequired(
                    f"job type {job_type!r} requires approval: the enqueuer's token must name "
                    "who it is (sub, client_id or username), so it cannot approve its own work"
                )
        if validator is not None:
            if not payload_given:
                raise InvalidInput(
                    f"job type {job_type!r} has a payload schema: send the payload inline"
                )
            validator(payload)  # InvalidInput (422) for anything but a match, never 500
        return Admission(
            tenant_id,
            job_type,
            spec.target_class,
            spec.max_attempts,
            job_type_version=entry.version,
            lease_default_ms=spec.lease_seconds * 1000,
            lease_max_ms=spec.max_lease_seconds * 1000,
            approval_required=spec.approval_required,
            approval_valid_ms=None
            if spec.approval_valid_seconds is None
            else spec.approval_valid_seconds * 1000,
        )

    # ------------------------------------------------------------------ cache

    def _key(self, tenant_id: str, job_type: str) -> dict[str, str]:
        return {"tenant_id": tenant_id, "operation_id": keys.catalogue_id(job_type)}

    def _fresh(self, cached: _Cached | None) -> bool:
        return cached is not None and self.clock() - cached.at < self.cache_ms

    def _cached_entry(
        self, tenant_id: str, job_type: str
    ) -> tuple[JobTypeEntry, Callable[[Any], Any] | None] | None:
        with self._lock:
            cached = self._entries.get((tenant_id, job_type))
        if self._fresh(cached):
            assert cached is not None
            return cached.value
        entry = self._read(tenant_id, job_type, consistent=False)
        return self._remember(tenant_id, job_type, entry)

    def _cached_strict(self, tenant_id: str) -> bool:
        with self._lock:
            cached = self._strict.get(tenant_id)
        if self._fresh(cached):
            assert cached is not None
            return bool(cached.value)
        strict = self.strict(tenant_id, consistent=False)
        with self._lock:
            self._strict[tenant_id] = _Cached(self.clock(), strict)
        return strict

    def _remember(
        self, tenant_id: str, job_type: str, entry: JobTypeEntry | None
    ) -> tuple[JobTypeEntry, Callable[[Any], Any] | None] | None:
        value = None
        if entry is not None and entry.deleted_at is None:
            schema = entry.spec.payload_schema
            validator = None
            if schema is not None:
                try:
                    validator = compile_schema(schema)
                except InvalidInput as error:
                    validator = _refusing(error.message)
            value = (entry, validator)
        with self._lock:
            self._entries[(tenant_id, job_type)] = _Cached(self.clock(), value)
            while len(self._entries) > 10_000:
                self._entries.pop(next(iter(self._entries)))
        return value

    def forget(self, tenant_id: str) -> None:
        """Drop what this engine cached of a tenant (after a tenant erasure)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == tenant_id]:
                del self._entries[key]
            self._strict.pop(tenant_id, None)
            self._erasing.pop(tenant_id, None)
