"""What an agent gets for one AG-UI run: the thread's state, its history, and ways to speak.

The state is the exposed model, loaded with the run's turn and saved with it. Each `sync()`
(and the run's end) sends what changed since the last event as one STATE_DELTA, a minimal
RFC 6902 patch made by our engine; several changes between two syncs coalesce into one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, Generic

import orjson
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    StateDeltaEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from .. import History, TurnState
from ..jsonpatch import make_patch
from ._exposed import ExposedState, M


class AgentRun(Generic[M]):
    """One run of the agent on its thread (a session: one user in one conversation)."""

    __slots__ = ("input", "state", "turn", "messages", "pending", "_exposed", "_emit", "_sent")

    def __init__(
        self,
        run_input: RunAgentInput,
        turn: TurnState,
        exposed: ExposedState[M],
        state: M,
        sent: dict[str, Any],
        emit: Callable[[BaseEvent], None],
        *,
        messages: list[dict[str, Any]],
        pending: dict[str, str],
    ) -> None:
        self.input = run_input
        """The validated request (its messages and tools, as the client sent them)."""
        self.messages = messages
        """The history the agent is given (the thread's, as the run's record keeps it): build
        the model call from these, not from the request's copy."""
        self.pending = pending
        """Calls of the client's tools still unanswered (call id -> tool name): the client may
        answer each once, in a later run."""
        self.state = state
        """The thread's state (a model instance): change it, then `await sync()`; it is
        written into the session bucket when the agent returns, saved with the run."""
        self.turn = turn
        """The run's whole turn: `turn.user`, `turn.app`, ... stay on the server."""
        self._exposed, self._emit, self._sent = exposed, emit, sent

    @property
    def history(self) -> History:
        """The thread's messages (the session's history); what the run says is appended."""
        return self.turn.history

    @property
    def sent(self) -> dict[str, Any]:
        """The exposed state as the client last received it."""
        return self._sent

    async def sync(self) -> None:
        """Send the state's changes since the last state event as one STATE_DELTA (none if
        nothing changed)."""
        view = self._exposed.view(self.state)
        patch = make_patch(self._sent, view)
        if patch:
            self._sent = view
            self._emit(StateDeltaEvent.model_validate({"delta": patch}))

    async def say(self, text: str, *, message_id: str | None = None) -> str:
        """Send an assistant text message and append it to the history; its id."""
        ident = message_id or _new_id()
        await self.history.append({"id": ident, "role": "assistant", "content": text})
        self._emit(TextMessageStartEvent(message_id=ident, role="assistant"))
        if text:
            self._emit(TextMessageContentEvent(message_id=ident, delta=text))
        self._emit(TextMessageEndEvent(message_id=ident))
        return ident

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Send a tool call (for the client to run when the run input declares the tool, or
        one the agent runs itself), kept in the history as an assistant message; the call's
        id. A call of a client tool waits for the client's one answer (`pending`)."""
        call_id, message_id = _new_id(), _new_id()
        args = orjson.dumps(dict(arguments)).decode()
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        await self.history.append({"id": message_id, "role": "assistant", "toolCalls": [call]})
        if any(tool.name == name for tool in self.input.tools or ()):  # the client runs it
            self.pending[call_id] = name
        self._emit(
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=name, parent_message_id=message_id
            )
        )
        self._emit(ToolCallArgsEvent(tool_call_id=call_id, delta=args))
        self._emit(ToolCallEndEvent(tool_call_id=call_id))
        return call_id

    async def tool_result(self, call_id: str, content: str) -> str:
        """Send the result of a tool call the agent ran, kept in the history; its id."""
        ident = _new_id()
        self.pending.pop(call_id, None)
        await self.history.append(
            {"id": ident, "role": "tool", "toolCallId": call_id, "content": content}
        )
        self._emit(ToolCallResultEvent(message_id=ident, tool_call_id=call_id, content=content))
        return ident


def _new_id() -> str:
    return uuid.uuid4().hex
