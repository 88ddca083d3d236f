"""A producer's W3C trace context, as an operation keeps it: bounded, validated, no library needed.

An enqueue may carry the producer's ``traceparent`` (and ``tracestate``) (W3C Trace Context:
https://www.w3.org/TR/trace-context/); the operation item keeps them (``traceparent``,
``tracestate``) and every claim hands them on, so a worker's handler continues the producer's
trace (:mod:`leasefence.otel` makes the spans when OpenTelemetry is installed; this module never
imports it).

Bounds (the item's byte budget, :mod:`leasefence.item_budget`): a ``traceparent`` is exactly
:data:`TRACEPARENT_BYTES` characters of version ``00``'s form (a later version's header is read
as version 00 reads it, its first 55 characters, as the standard says); a ``tracestate`` is kept
only when it is at most :data:`MAX_TRACESTATE_BYTES` printable ASCII characters. Over HTTP a
malformed ``traceparent`` is ignored (the standard's rule for a receiver: the operation is stored
without one, the enqueue is not refused), a ``tracestate`` that is malformed, too long or without
a valid ``traceparent`` is dropped; a caller of the engine that passes a malformed value gets
:class:`~leasefence.errors.InvalidInput`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from leasefence.errors import InvalidInput

#: A version-00 ``traceparent``: ``00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>``.
TRACEPARENT_BYTES = 55
#: The longest ``tracestate`` kept (the standard asks a vendor to propagate at least 512).
MAX_TRACESTATE_BYTES = 512

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACESTATE = re.compile(r"[\x20-\x7e]*")


@dataclass(frozen=True)
class TraceContext:
    """A validated trace context (see the module's docstring)."""

    traceparent: str
    tracestate: str | None = None

    @classmethod
    def from_headers(cls, traceparent: Any, tracestate: Any = None) -> TraceContext | None:
        """What a receiver keeps of these headers: None for a missing or malformed
        ``traceparent`` (ignored, never refused); ``tracestate`` only when it is valid."""
        parent = _traceparent(traceparent)
        if parent is None:
            return None
        return cls(parent, _tracestate(tracestate))

    @classmethod
    def checked(cls, traceparent: Any, tracestate: Any = None) -> TraceContext:
        """The same values, strictly: :class:`InvalidInput` for a malformed or too long one."""
        parent = _traceparent(traceparent)
        if parent is None or parent != traceparent:
            raise InvalidInput(
                "traceparent must be a W3C version-00 traceparent "
                "(00-<32 hex>-<16 hex>-<2 hex>, ids not all zeros)"
            )
        if tracestate is not None and _tracestate(tracestate) is None:
            raise InvalidInput(
                f"tracestate must be at most {MAX_TRACESTATE_BYTES} printable ASCII characters"
            )
        return cls(parent, tracestate or None)

    @classmethod
    def of_item(cls, item: Any) -> TraceContext | None:
        """The trace context an operation item keeps (None: none was given)."""
        parent = item.get("traceparent")
        return None if parent is None else cls(parent, item.get("tracestate"))

    def item_fields(self) -> dict[str, str]:
        """The item's attributes for it."""
        fields = {"traceparent": self.traceparent}
        if self.tracestate:
            fields["tracestate"] = self.tracestate
        return fields

    def headers(self) -> dict[str, str]:
        """As HTTP headers (what an OpenTelemetry propagator extracts)."""
        return self.item_fields()


def _traceparent(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00" and len(value) != TRACEPARENT_BYTES:
        return None
    if len(value) > TRACEPARENT_BYTES and value[TRACEPARENT_BYTES] != "-":
        return None  # a later version may add fields after a dash, nothing else
    return f"00-{trace_id}-{parent_id}-{flags}"


def _tracestate(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if len(value) > MAX_TRACESTATE_BYTES or _TRACESTATE.fullmatch(value) is None:
        return None
    return value
