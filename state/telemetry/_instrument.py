"""`instrument()` / `uninstrument()`: wrap the public entry points in spans and listen to the
lifecycle's events; put the originals back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from .. import AgentApplication, add_event_listener
from ..backends import ConflictError, Storage, StoreItem
from . import _names as names


@dataclass
class _Turn:
    """What a turn's span reports when it ends, gathered from its storage calls and events."""

    span: Span
    attempt: int = 1
    conflict: bool = False
    merged: bool = False
    redelivery: bool = False
    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)

    def attributes(self) -> dict[str, Any]:
        return {
            names.ATTEMPT: self.attempt,
            names.CONFLICT: self.conflict,
            names.MERGED: self.merged,
            names.REDELIVERY: self.redelivery,
            names.SCOPES_READ: sorted(self.read),
            names.SCOPES_WRITTEN: sorted(self.written),
        }


_turn: ContextVar[_Turn | None] = ContextVar("agent_state_telemetry_turn", default=None)


class _Installed:
    """One `instrument()`: the tracer and instruments, and how to undo every wrapper."""

    def __init__(self, tracer: trace.Tracer, meter: metrics.Meter) -> None:
        self.tracer = tracer
        self.turns = meter.create_counter("agent_state.turns", "{turn}", "Turns processed")
        self.reruns = meter.create_counter("agent_state.turn.reruns", "{run}", "Turns run again")
        self.conflicts = meter.create_counter(
            "agent_state.turn.conflicts", "{conflict}", "Saves that met another writer's change"
        )
        self.latency = meter.create_histogram(
            "agent_state.turn.duration", "s", "How long a turn took, re-runs included"
        )
        self.undo: list[Callable[[], None]] = []

    def wrap(self, owner: type, name: str, make: Callable[[Any], Any]) -> None:
        """Replace `owner.name` by `make(original)`, remembering how to put it back."""
        original = owner.__dict__[name]
        setattr(owner, name, make(original))
        self.undo.append(lambda: setattr(owner, name, original))

    def on_event(self, event: str, fields: Mapping[str, object]) -> None:
        """Count the lifecycle's events and mark the current turn's span with them."""
        turn = _turn.get()
        if event == "conflict":
            self.conflicts.add(1)
        elif event == "rerun":
            self.reruns.add(1)
        if turn is None:
            return
        if event == "conflict":
            turn.conflict = True
        elif event == "rerun":
            attempt = fields["attempt"]
            turn.attempt = attempt if isinstance(attempt, int) else turn.attempt + 1
            turn.read.clear()  # the scopes of the run that counts
            turn.written.clear()
        elif event == "merge":
            turn.merged = True
        elif event == "redelivery":
            turn.redelivery = True


_installed: _Installed | None = None


def instrument(
    *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> None:
    """Trace turns, storage calls and AG-UI runs, and record turn metrics, from now on.

    The providers default to OpenTelemetry's global ones. Calling it again re-instruments
    with the new providers."""
    global _installed
    uninstrument()
    installed = _Installed(
        trace.get_tracer("agent_state", tracer_provider=tracer_provider),
        metrics.get_meter("agent_state", meter_provider=meter_provider),
    )
    for operation in ("read", "write", "delete"):
        installed.wrap(Storage, operation, _storage_call(installed, operation))
    installed.wrap(AgentApplication, "process", _turn_call(installed))
    agui_endpoint = _agui_endpoint()
    if agui_endpoint is not None:
        installed.wrap(agui_endpoint, "__call__", _agui_call(installed))
    installed.undo.append(add_event_listener(installed.on_event))
    _installed = installed


def uninstrument() -> None:
    """Stop tracing: put back every wrapped method and stop listening."""
    global _installed
    if _installed is not None:
        for undo in reversed(_installed.undo):
            undo()
        _installed = None


def _turn_call(installed: _Installed) -> Callable[[Any], Any]:
    def make(process: Any) -> Any:
        async def traced(self: AgentApplication, activity: Any) -> Any:
            with installed.tracer.start_as_current_span(names.TURN_SPAN) as span:
                turn = _Turn(span)
                token = _turn.set(turn)
                started = time.perf_counter()
                try:
                    return await process(self, activity)
                finally:
                    _turn.reset(token)
                    span.set_attributes(turn.attributes())
                    outcome = {names.ATTEMPT: turn.attempt, names.REDELIVERY: turn.redelivery}
                    installed.turns.add(1, outcome)
                    installed.latency.record(time.perf_counter() - started)

        traced.__doc__ = process.__doc__
        return traced

    return make


def _storage_call(installed: _Installed, operation: str) -> Callable[[Any], Any]:
    span_name = names.STORAGE_SPANS[operation]

    def make(call: Any) -> Any:
        async def traced(self: Storage, keys: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(keys, (str, bytes)):  # refused by the call itself
                return await call(self, keys, *args, **kwargs)
            turn = _turn.get()
            batch = list(keys)  # a generator would be used up by counting it
            attributes: dict[str, AttributeValue] = {
                names.OPERATION: operation,
                names.BACKEND: type(self).__name__,
                names.KEY_COUNT: len(batch),
            }
            batch_arg: Any = batch
            if operation == "write":  # `keys` is the mapping of changes
                attributes[names.BYTES] = _size(keys.values())
                batch_arg = keys
            with installed.tracer.start_as_current_span(
                span_name, attributes=attributes, record_exception=False
            ) as span:
                try:
                    result = await call(self, batch_arg, *args, **kwargs)
                except ConflictError as exc:
                    span.set_status(Status(StatusCode.ERROR, "conflict"))
                    span.set_attribute("storage.conflict.keys", len(exc.keys))
                    raise
                if operation == "read":
                    span.set_attribute(names.BYTES, _size(result.values()))
            if turn is not None and operation != "delete":
                scopes = turn.read if operation == "read" else turn.written
                scopes.update(names.scope_of(key) for key in batch)
            return result

        traced.__doc__ = call.__doc__
        return traced

    return make


def _agui_call(installed: _Installed) -> Callable[[Any], Any]:
    def make(call: Any) -> Any:
        async def traced(self: Any, scope: Any, receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                return await call(self, scope, receive, send)  # type: ignore[no-any-return]
            with installed.tracer.start_as_current_span(names.AGUI_SPAN) as span:
                span.set_attribute("http.request.method", str(scope.get("method", "")))
                await call(self, scope, receive, send)

        return traced

    return make


def _size(items: Iterable[StoreItem]) -> int:
    """The JSON bytes of documents (their encoded bytes where they carry them)."""
    return sum(len(item.data) if item.data is not None else len(orjson.dumps(item.value))
               for item in items)  # fmt: skip


def _agui_endpoint() -> type | None:
    """`AGUIEndpoint`, when the `agui` extra is installed."""
    try:
        from ..agui import AGUIEndpoint
    except ImportError:
        return None
    return AGUIEndpoint
