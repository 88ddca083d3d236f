"""A job type's catalogue entry: its declared fields (:class:`JobTypeSpec`, validated, defaults
filled in), the stored entry (:class:`JobTypeEntry`), what one enqueue runs under
(:class:`Admission`), and catalogue files: :func:`parse_document` and the field-by-field
:func:`plan` that turns one catalogue into another. No I/O (see :mod:`._catalogue` for that).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from leasefence import payload_schemas
from leasefence.clock import to_rfc3339
from leasefence.errors import InvalidInput
from leasefence.limits import (
    DEFAULT_APPROVAL_VALID_SECONDS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    MAX_APPROVAL_VALID_SECONDS,
    MAX_ATTEMPTS,
    MAX_LEASE_SECONDS,
    MAX_SCHEMA_BYTES,
    MAX_TEXT_LENGTH,
    MIN_APPROVAL_VALID_SECONDS,
)
from leasefence.model import TargetClass
from leasefence.validation import validate_id

#: The names the single-module catalogue gave these limits (see :mod:`leasefence.limits`).
MAX_TEXT = MAX_TEXT_LENGTH
DEFAULT_ATTEMPTS = DEFAULT_MAX_ATTEMPTS
__all__ = [
    "DEFAULT_APPROVAL_VALID_SECONDS",
    "DEFAULT_ATTEMPTS",
    "DEFAULT_LEASE_SECONDS",
    "FIELDS",
    "MAX_APPROVAL_VALID_SECONDS",
    "MAX_LEASE_SECONDS",
    "MAX_SCHEMA_BYTES",
    "MAX_SUMMARY_FIELDS",
    "MAX_TEXT",
    "RUNBOOK_URL_PATTERN",
    "Admission",
    "Change",
    "JobTypeEntry",
    "JobTypeSpec",
    "compile_schema",
    "parse_document",
    "plan",
]

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
    "approval_summary",
)
#: At most this many payload fields summarize an approval in the approvers' inbox.
MAX_SUMMARY_FIELDS = 6


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


def _summary(value: Any, approval: bool, schema: Any) -> tuple[str, ...]:
    """``approval_summary``: the payload fields an approver sees in the inbox, each one a
    property the entry's ``payload_schema`` declares (so every admitted payload's value for it
    is of a known shape)."""
    if not approval or schema is None:
        raise InvalidInput("approval_summary needs approval_required: true and a payload_schema")
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_SUMMARY_FIELDS
        or not all(isinstance(v, str) and 1 <= len(v) <= MAX_TEXT for v in value)
        or len(set(value)) != len(value)
    ):
        raise InvalidInput(
            f"approval_summary must be a list of 1-{MAX_SUMMARY_FIELDS} distinct payload field names"
        )
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        raise InvalidInput(
            "approval_summary names fields the payload_schema does not declare (it declares no "
            "properties)"
        )
    missing = [name for name in value if name not in properties]
    if missing:
        raise InvalidInput(
            f"approval_summary names fields the payload_schema does not declare: {', '.join(missing)}"
        )
    return tuple(value)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compile_schema(schema: Any) -> Callable[[Any], Any]:
    """A validator for ``schema``: see :mod:`leasefence.payload_schemas` (patterns checked here
    and evaluated in linear time, remote ``$ref`` s refused, never fetched)."""
    return payload_schemas.compile_schema(schema)


def refusing(message: str) -> Callable[[Any], Any]:
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
    #: The payload fields the approvers' inbox shows (declared by payload_schema).
    approval_summary: tuple[str, ...] | None = None

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
            spec,
            "max_attempts",
            1 if target is TargetClass.D else DEFAULT_ATTEMPTS,
            1,
            MAX_ATTEMPTS,
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
                MIN_APPROVAL_VALID_SECONDS,
                MAX_APPROVAL_VALID_SECONDS,
            )
        elif spec.get("approval_valid_seconds") is not None:
            raise InvalidInput("approval_valid_seconds needs approval_required: true")
        schema = spec.get("payload_schema")
        if schema is not None:
            compile_schema(schema)
        summary = spec.get("approval_summary")
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
            approval_summary=None if summary is None else _summary(summary, approval, schema),
        )

    def to_public(self) -> dict[str, Any]:
        public: dict[str, Any] = {
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
        # Only when declared, so that the fingerprint of an entry without one stays what it was.
        if self.approval_summary is not None:
            public["approval_summary"] = list(self.approval_summary)
        return public

    @property
    def fingerprint(self) -> str:
        return "sha256:" + hashlib.sha256(canonical(self.to_public()).encode()).hexdigest()


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
            approval_summary=None
            if item.get("approval_summary") is None
            else tuple(item["approval_summary"]),
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
            "approval_summary": None,
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
            lines.append(f"    {name}: {canonical(old)} -> {canonical(new)}")
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
        job_type_id(name)
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
            diff = {
                k: (before.get(k), after.get(k)) for k in FIELDS if before.get(k) != after.get(k)
            }
            changes.append(Change("changed", name, diff, new))
    return changes


def job_type_id(value: Any) -> str:
    return validate_id("job_type", value)
