"""OpenTelemetry spans and metrics for agent-state (the `otel` extra: opentelemetry-api).

Nothing is traced until `instrument()` is called: it wraps the public `Storage.read`,
`write` and `delete`, `AgentApplication.process` and the AG-UI endpoint, and listens to the
lifecycle's events (`agent_state.add_event_listener`). Uninstrumented, the library runs no
telemetry code at all. `uninstrument()` puts everything back.
"""

from __future__ import annotations

try:
    import opentelemetry.trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError(
        "agent_state.telemetry needs OpenTelemetry: pip install -e '.[otel]' (in the clone)"
    ) from exc

from ._instrument import instrument, uninstrument

__all__ = ["instrument", "uninstrument"]
