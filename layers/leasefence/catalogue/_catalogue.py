"""The catalogue's reads and writes: :class:`Catalogue`, one per engine, with its short cache.

Every write is ONE conditional ``UpdateItem``: the version check is inside the write, and a
refusal returns the item as it is (``ALL_OLD``), so the loser learns why without a read. Reads
for enqueues are eventually consistent and cached for :data:`~leasefence.limits.CATALOGUE_CACHE_MS`.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from leasefence import keys
from leasefence.catalogue._entries import (
    Admission,
    Change,
    JobTypeEntry,
    JobTypeSpec,
    canonical,
    compile_schema,
    job_type_id,
    parse_document,
    plan,
    refusing,
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
from leasefence.limits import CATALOGUE_CACHE_MS, DEFAULT_MAX_ATTEMPTS, MEMORY_ENTRIES
from leasefence.model import TargetClass
from leasefence.store import ConditionFailed, Store
from leasefence.validation import validate_id

#: How long an engine trusts what it read of a tenant's catalogue (ms of its clock).
CACHE_MS = CATALOGUE_CACHE_MS
#: The attribute a tenant erasure sets on the tenant's settings item and catalogue entries (its
#: start, ms): an admission that reads either refuses the enqueue (409 ``tenant_erasing``).
ERASING = "tenant_erasing"


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
        entry = self._read(tenant_id, job_type_id(job_type), consistent=True)
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
                while len(self._erasing) > MEMORY_ENTRIES:
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
        job_type = job_type_id(job_type)
        if request_token is not None:
            validate_id("request_token", request_token)
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
            else canonical(spec.payload_schema),
            "approval_summary": None
            if spec.approval_summary is None
            else list(spec.approval_summary),
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
        job_type = job_type_id(job_type)
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
                max_attempts = 1 if target is TargetClass.D else DEFAULT_MAX_ATTEMPTS
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
                    validator = refusing(error.message)
            value = (entry, validator)
        with self._lock:
            self._entries[(tenant_id, job_type)] = _Cached(self.clock(), value)
            while len(self._entries) > MEMORY_ENTRIES:
                self._entries.pop(next(iter(self._entries)))
        return value

    def forget(self, tenant_id: str) -> None:
        """Drop what this engine cached of a tenant (after a tenant erasure)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == tenant_id]:
                del self._entries[key]
            self._strict.pop(tenant_id, None)
            self._erasing.pop(tenant_id, None)
