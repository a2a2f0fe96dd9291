"""StateMirror: an AG-UI consumer keeping a thread's state and messages as the protocol says.

STATE_SNAPSHOT replaces the state, STATE_DELTA patches it in place and atomically (a malformed
patch halts the run, an unappliable one is skipped and flags a resync; an operation of an
unknown `op` is dropped with a warning and the rest applies), MESSAGES_SNAPSHOT reconciles the
messages (a message of an unknown role is dropped with a warning). State and messages carry
over from one run of the thread to the next; a run input without state starts from `{}`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ag_ui.core import RunAgentInput
from pydantic import BaseModel

from ..jsonpatch import PatchConflictError, PatchFormatError, ProtocolError, apply_patch
from ..jsonpatch import validate_patch as _validate_patch
from ._messages import MessageLog, parse_messages
from ._mirror_errors import MalformedEventError, MalformedPatchError, RunHaltedError
from ._sse import aiter_sse_events, iter_sse_events
from ._streaming import STREAM_HANDLERS
from ._wire import event_type, json_copy, require_str, to_wire

if TYPE_CHECKING:
    from ._client import AGUIClient

__all__ = ["SkippedDelta", "StateMirror"]

log = logging.getLogger("agent_state.agui.mirror")
EventInput = BaseModel | Mapping[str, Any]


@dataclass(frozen=True)
class SkippedDelta:
    """A well-formed STATE_DELTA the current state refused; the state is as it was before it."""

    run_id: str | None
    patch: list[dict[str, Any]]
    error: PatchConflictError


class StateMirror:
    """The client side of one AG-UI thread: apply its events, then build the next run's input.

    `state` and `messages` are the live values: read them, never change them in place.
    `on_skipped` is called for each skipped delta, `on_resync` once when the mirror starts
    needing a fresh STATE_SNAPSHOT (the application asks its agent for one).
    """

    def __init__(
        self,
        *,
        thread_id: str | None = None,
        state: Any = None,
        messages: Iterable[BaseModel | Mapping[str, Any]] = (),
        on_skipped: Callable[[SkippedDelta], None] | None = None,
        on_resync: Callable[[StateMirror], None] | None = None,
    ) -> None:
        self.thread_id = thread_id or str(uuid.uuid4())
        self._state = json_copy(state, "the initial state")
        self._messages = MessageLog(parse_messages(list(messages), "the initial messages"))
        self._on_skipped = on_skipped
        self._on_resync = on_resync
        self._run_id: str | None = None
        self._halted: ProtocolError | None = None
        self._needs_resync = False

    @property
    def state(self) -> Any:
        """The current state (any JSON value)."""
        return self._state

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The thread's messages in wire form, in order (a new list of the live messages)."""
        return list(self._messages.items)

    @property
    def run_id(self) -> str | None:
        """The run the mirror is following, if any."""
        return self._run_id

    @property
    def needs_resync(self) -> bool:
        """True from a skipped delta until the next STATE_SNAPSHOT."""
        return self._needs_resync

    @property
    def halted(self) -> ProtocolError | None:
        """The fatal error that stopped the current run, or None while events are accepted."""
        return self._halted

    def start_run(self, run_input: RunAgentInput) -> None:
        """Follow a new run: its baseline state is the input's state (`{}` when it has none)."""
        self._begin(run_input.run_id, run_input.model_dump(mode="json", by_alias=True))

    def next_input(
        self,
        *,
        run_id: str | None = None,
        tools: Iterable[BaseModel | Mapping[str, Any]] = (),
        context: Iterable[BaseModel | Mapping[str, Any]] = (),
        forwarded_props: Any = None,
        resume: Iterable[BaseModel | Mapping[str, Any]] | None = None,
    ) -> RunAgentInput:
        """The next run's input: the current state and the messages without activity ones."""
        history = [message for message in self._messages.items if message["role"] != "activity"]
        return RunAgentInput.model_validate(
            {
                "threadId": self.thread_id,
                "runId": run_id or str(uuid.uuid4()),
                "state": json_copy(self._state, "the state"),
                "messages": json_copy(history, "the messages"),
                "tools": list(tools),
                "context": list(context),
                "forwardedProps": {} if forwarded_props is None else forwarded_props,
                **({} if resume is None else {"resume": list(resume)}),
            }
        )

    async def arun(
        self, client: AGUIClient, run_input: RunAgentInput | None = None
    ) -> RunAgentInput:
        """Run the agent through `client` and follow the run: `run_input`, by default
        `next_input()`, is posted and each event applied as it arrives; the input is returned.
        An answer that is no event stream (an error status, such as 401 without credentials)
        raises `RunRefusedError` with the mirror left as it was."""
        run_input = run_input if run_input is not None else self.next_input()
        started = False
        async for event in client.stream(run_input):
            if not started:  # the server accepted the run: follow it
                self.start_run(run_input)
                started = True
            self.apply(event)
        return run_input

    def apply(self, event: EventInput) -> None:
        """Apply one event (an ag-ui model or a wire-form dict); see the module docstring."""
        wire, owned = to_wire(event)
        self._apply_wire(wire, owned)

    def apply_all(self, events: Iterable[EventInput]) -> None:
        """Apply events in order, stopping at the first fatal one (which is raised)."""
        for event in events:
            self.apply(event)

    def consume_sse(self, chunks: Iterable[bytes]) -> None:
        """Apply an SSE byte stream (one HTTP response body; chunks may split anywhere)."""
        for wire in iter_sse_events(chunks):
            self._apply_wire(wire, True)

    async def aconsume_sse(self, chunks: AsyncIterable[bytes]) -> None:
        """consume_sse for an async byte stream, e.g. httpx's response.aiter_bytes()."""
        async for wire in aiter_sse_events(chunks):
            self._apply_wire(wire, True)

    def _apply_wire(self, event: dict[str, Any], owned: bool) -> None:
        kind = event_type(event)
        if kind == "RUN_STARTED":
            run_id = require_str(event, "runId")
            if run_id != self._run_id:
                run_input = event.get("input")
                self._begin(run_id, run_input if isinstance(run_input, dict) else None)
                return
        if self._halted is not None:
            raise RunHaltedError(self._run_id, self._halted)
        try:
            self._dispatch(kind, event, owned)
        except ProtocolError as exc:
            self._halted = exc
            raise

    def _dispatch(self, kind: str, event: dict[str, Any], owned: bool) -> None:
        if kind == "STATE_DELTA":
            self._delta(event.get("delta", _ABSENT))
        elif kind == "STATE_SNAPSHOT":
            if "snapshot" not in event:
                raise MalformedEventError("STATE_SNAPSHOT needs a 'snapshot' member")
            snapshot = event["snapshot"]
            self._state = snapshot if owned else json_copy(snapshot, "the STATE_SNAPSHOT")
            self._needs_resync = False
        elif kind == "MESSAGES_SNAPSHOT":
            self._messages.reconcile(
                parse_messages(event.get("messages"), "MESSAGES_SNAPSHOT", drop_unknown=True)
            )
        elif kind in STREAM_HANDLERS:
            STREAM_HANDLERS[kind](self._messages, event if owned else json_copy(event, kind))
        else:
            log.debug("ignoring a %s event: it changes neither state nor messages", kind)

    def _delta(self, patch: Any) -> None:
        try:
            dropped = _validate_patch(patch, drop_unknown=True)
            if dropped:
                log.warning("dropped the operations %s of a STATE_DELTA of run %r: unknown op",
                            dropped, self._run_id)  # fmt: skip
            self._state = apply_patch(self._state, patch, in_place=True, drop_unknown=True)
        except PatchFormatError as exc:
            raise _malformed(patch, exc) from None
        except PatchConflictError as exc:
            self._skip(patch, exc)

    def _skip(self, patch: list[dict[str, Any]], error: PatchConflictError) -> None:
        log.warning("skipped a STATE_DELTA of run %r: %s", self._run_id, error)
        if self._on_skipped is not None:
            self._on_skipped(SkippedDelta(self._run_id, patch, error))
        if not self._needs_resync:
            self._needs_resync = True
            if self._on_resync is not None:
                self._on_resync(self)

    def _begin(self, run_id: str, run_input: dict[str, Any] | None) -> None:
        """Follow run `run_id`; with its input, from the input's state (`{}` without one)."""
        self._run_id = run_id
        self._halted = None
        if run_input is not None:
            state = run_input.get("state")
            self._state = {} if state is None else json_copy(state, "the run input's state")


_ABSENT = object()


def _malformed(patch: Any, error: PatchFormatError) -> MalformedPatchError:
    """Name the first malformed operation of a patch the engine refused."""
    if patch is _ABSENT:
        return MalformedPatchError("STATE_DELTA needs a 'delta' member", None, None)
    if isinstance(patch, list):
        for index, operation in enumerate(patch):
            try:
                _validate_patch([operation])
            except PatchFormatError as exc:
                reason = str(exc).replace("operation 0", f"operation {index}", 1)
                return MalformedPatchError(f"STATE_DELTA: {reason}", index, operation)
    return MalformedPatchError(f"STATE_DELTA: {error}", None, None)
