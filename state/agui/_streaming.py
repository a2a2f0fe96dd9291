"""Streamed message events (TEXT_MESSAGE_*, TOOL_CALL_*) applied to a MessageLog.

They follow the reference client's reducer: a content or args event for an unknown id is
logged and ignored, never fatal, since the messages can be resynced by a MESSAGES_SNAPSHOT.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ._messages import MessageLog
from ._mirror_errors import MalformedEventError
from ._wire import require_str

__all__ = ["STREAM_HANDLERS"]

log = logging.getLogger("agent_state.agui.mirror")
Event = dict[str, Any]


def _text_start(messages: MessageLog, event: Event) -> None:
    message_id = require_str(event, "messageId")
    held = messages.get(message_id)
    if held is not None:
        if held["role"] == "activity":
            log.warning("TEXT_MESSAGE_START: message %r is an activity message", message_id)
        return  # a restarted message keeps what it has
    message: Event = {"id": message_id, "role": event.get("role") or "assistant", "content": ""}
    if isinstance(event.get("name"), str):
        message["name"] = event["name"]
    if isinstance(event.get("subagentRunId"), str):
        message["subagentRunId"] = event["subagentRunId"]
    messages.put(message)


def _text_content(messages: MessageLog, event: Event) -> None:
    message_id = require_str(event, "messageId")
    delta = require_str(event, "delta")
    held = messages.get(message_id)
    if held is None or held["role"] == "activity":
        log.warning("TEXT_MESSAGE_CONTENT: no text message with id %r", message_id)
        return
    content = held.get("content")
    held["content"] = (content if isinstance(content, str) else "") + delta


def _text_end(messages: MessageLog, event: Event) -> None:
    require_str(event, "messageId")


def _tool_start(messages: MessageLog, event: Event) -> None:
    call_id = require_str(event, "toolCallId")
    name = require_str(event, "toolCallName")
    found = messages.tool_call(call_id)
    if found is not None:
        found[1]["function"]["name"] = name
        return
    parent_id = event.get("parentMessageId")
    parent = messages.get(parent_id) if isinstance(parent_id, str) and parent_id else None
    if parent is None or parent["role"] != "assistant":
        owner_id = parent_id if isinstance(parent_id, str) and parent_id and not parent else call_id
        parent = {"id": owner_id, "role": "assistant", "toolCalls": []}
        if isinstance(event.get("subagentRunId"), str):
            parent["subagentRunId"] = event["subagentRunId"]
        messages.put(parent)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    messages.add_call(parent, call)


def _tool_args(messages: MessageLog, event: Event) -> None:
    call_id = require_str(event, "toolCallId")
    delta = require_str(event, "delta")
    found = messages.tool_call(call_id)
    if found is None:
        log.warning("TOOL_CALL_ARGS: no tool call with id %r", call_id)
        return
    function = found[1]["function"]
    function["arguments"] = str(function.get("arguments") or "") + delta


def _tool_end(messages: MessageLog, event: Event) -> None:
    require_str(event, "toolCallId")


def _tool_result(messages: MessageLog, event: Event) -> None:
    message_id = require_str(event, "messageId")
    call_id = require_str(event, "toolCallId")
    content = event.get("content")
    if not isinstance(content, (str, list)):
        raise MalformedEventError(f"TOOL_CALL_RESULT needs a 'content', got {content!r}")
    message: Event = {
        "id": message_id,
        "role": event.get("role") or "tool",
        "content": content,
        "toolCallId": call_id,
    }
    if isinstance(event.get("subagentRunId"), str):
        message["subagentRunId"] = event["subagentRunId"]
    found = messages.tool_call(call_id)
    position = None
    if found is not None and found[0]["role"] == "assistant" and messages.get(message_id) is None:
        items = messages.items
        position = items.index(found[0]) + 1
        while position < len(items) and items[position]["role"] == "tool":
            position += 1
    messages.put(message, position)


STREAM_HANDLERS: dict[str, Callable[[MessageLog, Event], None]] = {
    "TEXT_MESSAGE_START": _text_start,
    "TEXT_MESSAGE_CONTENT": _text_content,
    "TEXT_MESSAGE_END": _text_end,
    "TOOL_CALL_START": _tool_start,
    "TOOL_CALL_ARGS": _tool_args,
    "TOOL_CALL_END": _tool_end,
    "TOOL_CALL_RESULT": _tool_result,
}
