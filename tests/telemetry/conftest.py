"""OpenTelemetry's SDK with in-memory exporters, and agent-state instrumented onto it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_state.telemetry import instrument, uninstrument


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def counts(self) -> dict[str, float]:
        """Each metric's sum (counters) or count (histograms), over every attribute set."""
        data = self.metrics.get_metrics_data()
        totals: dict[str, float] = {}
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count
                        totals[metric.name] = totals.get(metric.name, 0) + value
        return totals


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    instrument(tracer_provider=tracer_provider, meter_provider=MeterProvider([reader]))
    try:
        yield Telemetry(spans, reader)
    finally:
        uninstrument()
