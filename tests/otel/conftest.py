"""An OpenTelemetry SDK tracer provider for this process, recording only while a test of this
folder runs, its spans kept in memory."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _WhileActive(trace.TracerProvider):
    """The global provider (OpenTelemetry sets it once per process, as an application or an
    ADOT layer does): the SDK's while :attr:`active`, else no-op tracers, so that the other
    tests of this process run as without OpenTelemetry."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.sdk = TracerProvider()
        self.sdk.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.active = False

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return self.sdk.get_tracer(*args, **kwargs) if self.active else trace.NoOpTracer()


def _provider() -> _WhileActive:
    if not isinstance(trace.get_tracer_provider(), _WhileActive):
        trace.set_tracer_provider(_WhileActive())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, _WhileActive), "another tracer provider was set in this process"
    return provider


@pytest.fixture
def spans():
    """The finished spans of this test (an in-memory exporter, cleared before it)."""
    provider = _provider()
    provider.exporter.clear()
    provider.active = True
    yield provider.exporter
    provider.active = False
    provider.exporter.clear()
