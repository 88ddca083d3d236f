"""An OpenTelemetry SDK tracer provider for this process, its spans kept in memory."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Exporter(InMemorySpanExporter):
    """Keeps spans only while a test of this folder runs: the provider stays set for the rest of
    the process (OpenTelemetry sets it once), and later tests' claims must not pile up here."""

    active = False

    def export(self, spans):
        return super().export(spans) if self.active else SpanExportResult.SUCCESS


_EXPORTER = _Exporter()


def _provider() -> TracerProvider:
    """The process's global provider (set once: OpenTelemetry refuses a second), exporting to
    :data:`_EXPORTER`, as an application or an ADOT layer sets it."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        current = trace.get_tracer_provider()
        assert isinstance(current, TracerProvider)
        current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    return current


@pytest.fixture
def spans():
    """The finished spans of this test (the exporter, cleared before it)."""
    _provider()
    _EXPORTER.clear()
    _EXPORTER.active = True
    yield _EXPORTER
    _EXPORTER.active = False
    _EXPORTER.clear()
