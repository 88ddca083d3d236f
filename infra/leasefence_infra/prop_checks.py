"""Checks of single props fields, shared by :class:`~leasefence_infra.props.LeaseFenceServiceProps`'s
validation: a tenant id, an object with a given attribute, a whole number in a range."""

from __future__ import annotations

from typing import Any


def tenant_id(name: str, value: Any) -> None:
    from leasefence.errors import InvalidInput
    from leasefence.validation import validate_id

    if not isinstance(value, str):
        raise TypeError(f"{name} must be a tenant id (a string), got {type(value).__name__}")
    try:
        validate_id("tenant_id", value)
    except InvalidInput as error:
        raise ValueError(f"{name}: {error.message}") from None
    if value != value.strip():
        raise ValueError(f"{name}: {value!r} has leading or trailing whitespace")


def require(value: Any, attribute: str, name: str, what: str) -> None:
    if not hasattr(value, attribute):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")


def int_in(props: Any, name: str, low: int, high: int | None) -> None:
    value = getattr(props, name)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be a whole number {bound}, got {value!r}")
