"""A stand-in for your payment provider's client: ``execute(key, request)`` under an idempotency
key, ``lookup(key)`` (class C). Swap in your own."""

from __future__ import annotations

from leasefence.targets.idempotent_api import InMemoryIdempotentApi

payments = InMemoryIdempotentApi()
