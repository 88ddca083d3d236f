"""Input validation shared by the engine, the catalogue, the API and the stream readers.

Every check raises :class:`~leasefence.errors.InvalidInput` (422 ``invalid_request``) with a
message that names the field and the rule, before anything is written. The control-character
class is defined here once (:data:`CONTROL_CHARACTERS`): the engine's regex, the API models'
``pattern`` and the token checks derive from it. (``functions/pretoken`` keeps its own copy: it is
standard-library only by design.)

Standard library only, like :mod:`leasefence.limits`: the CDK props import these checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final, TypeGuard

from leasefence.errors import InvalidInput
from leasefence.limits import (
    DEFAULT_APPROVAL_VALID_MS,
    MAX_APPROVAL_VALID_MS,
    MAX_CHECKPOINT_BYTES,
    MAX_CLAIM_JOB_TYPES,
    MAX_FENCE,
    MAX_ID_LENGTH,
    MAX_LEASE_MS,
    MIN_APPROVAL_VALID_MS,
    MIN_LEASE_MS,
)

#: C0 controls, DEL and C1 controls: no id, token or header value may contain one.
CONTROL_CHARACTERS: Final = "\\x00-\\x1f\\x7f-\\x9f"
#: Finds a control character.
CONTROL_RE: Final = re.compile(f"[{CONTROL_CHARACTERS}]")
#: A whole string without control characters (the API models' ``pattern``).
NO_CONTROL: Final = f"^[^{CONTROL_CHARACTERS}]*$"
#: ``sha256:`` and 64 lowercase hex digits.
HASH_PATTERN: Final = r"^sha256:[0-9a-f]{64}$"
HASH_RE: Final = re.compile(HASH_PATTERN)


class _Missing:
    """The type of :data:`MISSING`."""

    def __repr__(self) -> str:
        return "MISSING"


#: "Not given" where None is a value (a checkpoint of ``null``).
MISSING: Any = _Missing()


def validate_id(name: str, value: Any) -> str:
    """An id: a string of 1-:data:`~leasefence.limits.MAX_ID_LENGTH` characters without control
    characters."""
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_ID_LENGTH
        or CONTROL_RE.search(value)
    ):
        raise InvalidInput(
            f"{name} must be 1-{MAX_ID_LENGTH} characters with no control characters"
        )
    return value


def validate_actor(actor: Any, default: str | None) -> str | None:
    """Who makes a transition (a worker id, an operator's or producer's identity): an id, or the
    default when none is given."""
    return default if actor is None else validate_id("actor", actor)


def validate_text(name: str, value: Any, limit: int, required: bool = True) -> str | None:
    """Free text of at most ``limit`` characters (not empty when ``required``; None allowed when
    not)."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > limit or (required and not value):
        raise InvalidInput(f"{name} must be a string of at most {limit} characters")
    return value


def validate_hash(payload_hash: Any) -> str:
    """A payload hash: ``sha256:`` and 64 lowercase hex digits."""
    if not isinstance(payload_hash, str) or not HASH_RE.match(payload_hash):
        raise InvalidInput("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
    return payload_hash


def is_int(value: Any) -> TypeGuard[int]:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def validate_fence(fence: Any) -> int:
    """A fence: a positive integer below 2**53."""
    if not is_int(fence) or not 1 <= fence <= MAX_FENCE:
        raise InvalidInput("fence must be a positive integer")
    return int(fence)


def validate_lease(lease_ms: Any) -> int:
    """A lease asked for: from :data:`~leasefence.limits.MIN_LEASE_MS` to
    :data:`~leasefence.limits.MAX_LEASE_MS`."""
    if not is_int(lease_ms) or not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
        raise InvalidInput(f"lease must be from {MIN_LEASE_MS} to {MAX_LEASE_MS} ms")
    return int(lease_ms)


def validate_job_types(job_types: Iterable[str] | None) -> tuple[str, ...] | None:
    """The job types a claim asks for: None (every type), or 1 to
    :data:`~leasefence.limits.MAX_CLAIM_JOB_TYPES` ids (duplicates dropped, order kept)."""
    if job_types is None:
        return None
    types = tuple(dict.fromkeys(validate_id("job_type", t) for t in job_types))
    if not types or len(types) > MAX_CLAIM_JOB_TYPES:
        raise InvalidInput(f"job_types must list 1 to {MAX_CLAIM_JOB_TYPES} job types")
    return types


def validate_approval_valid_ms(value: Any) -> int:
    """How long an approval stays valid: the default when None, else within the bounds."""
    if value is None:
        return DEFAULT_APPROVAL_VALID_MS
    if not is_int(value) or not MIN_APPROVAL_VALID_MS <= value <= MAX_APPROVAL_VALID_MS:
        raise InvalidInput(
            f"approval validity must be from {MIN_APPROVAL_VALID_MS} to {MAX_APPROVAL_VALID_MS} ms"
        )
    return int(value)


def validate_limit(value: Any, high: int, name: str = "limit") -> int:
    """A page or step size from 1 to ``high``."""
    if not is_int(value) or not 1 <= value <= high:
        raise InvalidInput(f"{name} must be from 1 to {high}")
    return int(value)


def encode_checkpoint(checkpoint: Any) -> str:
    """A checkpoint as the compact, sorted JSON the item keeps (at most
    :data:`~leasefence.limits.MAX_CHECKPOINT_BYTES`)."""
    try:
        text = json.dumps(checkpoint, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput("checkpoint must be JSON") from error
    if len(text.encode()) > MAX_CHECKPOINT_BYTES:
        raise InvalidInput(f"checkpoint must be at most {MAX_CHECKPOINT_BYTES} bytes of JSON")
    return text
