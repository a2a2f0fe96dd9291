"""The mirror's message list: snapshot reconciliation and lookups by message and tool call id.

Messages are kept in wire form (camelCase dicts, optional fields without a value left out).
Ids are unique in the list: an incoming message with a held id replaces that message in place.
"""

from __future__ import annotations

import logging
from typing import Any, get_args

from ag_ui.core import Message
from pydantic import BaseModel, TypeAdapter, ValidationError

from ._mirror_errors import MalformedEventError

__all__ = ["MessageLog", "parse_messages"]

log = logging.getLogger("agent_state.agui.mirror")
_MESSAGE: TypeAdapter[Any] = TypeAdapter(Message)
_ROLES = frozenset(
    get_args(model.model_fields["role"].annotation)[0] for model in get_args(get_args(Message)[0])
)
"""The roles the ag-ui package's message models know (a `Literal` on each model)."""
# Roles a snapshot may leave out without dropping them: the producer may not track them.
_SELF_DECLARED_ROLES = ("activity", "reasoning")


def parse_messages(raw: Any, what: str, *, drop_unknown: bool = False) -> list[dict[str, Any]]:
    """Validate messages (models or wire dicts) and return private wire-form copies. With
    `drop_unknown`, a message whose `role` is a string naming no known role is left out with
    a warning (the unrecognised-member rule); a missing or non-string role stays malformed."""
    if not isinstance(raw, list):
        raise MalformedEventError(f"{what} must be a list of messages, got {type(raw).__name__}")
    parsed = []
    for index, item in enumerate(raw):
        role = item.get("role") if isinstance(item, dict) else None
        if drop_unknown and isinstance(role, str) and role not in _ROLES:
            log.warning("dropped %s[%d]: unknown message role %r", what, index, role[:40])
            continue
        try:
            model = item if isinstance(item, BaseModel) else _MESSAGE.validate_python(item)
        except ValidationError as exc:
            raise MalformedEventError(f"{what}[{index}] is not a valid message: {exc}") from None
        parsed.append(model.model_dump(mode="json", by_alias=True))
    return parsed


class MessageLog:
    """An ordered list of messages with unique ids, indexed by id and by tool call id."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.items: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._calls: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._rebuild(messages)

    def _rebuild(self, messages: list[dict[str, Any]]) -> None:
        self.items, self._by_id, self._calls = [], {}, {}
        for message in messages:
            self.put(message)

    def get(self, message_id: str) -> dict[str, Any] | None:
        return self._by_id.get(message_id)

    def tool_call(self, call_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(owning message, tool call) for a tool call id, or None."""
        return self._calls.get(call_id)

    def put(self, message: dict[str, Any], position: int | None = None) -> None:
        """Replace the message with the same id in place, or insert it (at the end by default)."""
        held = self._by_id.get(message["id"])
        if held is not None:
            self.items[self.items.index(held)] = message
            for call in held.get("toolCalls") or ():
                key = call.get("id") if isinstance(call, dict) else None
                found = self._calls.get(key) if isinstance(key, str) else None
                if found is not None and found[0] is held:
                    del self._calls[call["id"]]
        elif position is None:
            self.items.append(message)
        else:
            self.items.insert(position, message)
        self._by_id[message["id"]] = message
        self._index_calls(message)

    def add_call(self, owner: dict[str, Any], call: dict[str, Any]) -> None:
        owner.setdefault("toolCalls", []).append(call)
        self._calls[call["id"]] = (owner, call)

    def reconcile(self, snapshot: list[dict[str, Any]]) -> None:
        """Apply a MESSAGES_SNAPSHOT (see docs/agui.md, "Consumer: StateMirror").

        Held ids are replaced in place, unseen messages appended in snapshot order, other held
        messages dropped, except activity / reasoning ones when the snapshot has none of that
        role. One id twice in a snapshot: the last occurrence wins, at the first one's place.
        """
        incoming = {message["id"]: message for message in snapshot}
        present = {message["role"] for message in incoming.values()}
        kept_roles = {role for role in _SELF_DECLARED_ROLES if role not in present}
        merged = [
            incoming.get(message["id"], message)
            for message in self.items
            if message["id"] in incoming or message["role"] in kept_roles
        ]
        held = self._by_id
        merged += [message for key, message in incoming.items() if key not in held]
        self._rebuild(merged)

    def _index_calls(self, message: dict[str, Any]) -> None:
        for call in message.get("toolCalls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                self._calls[call["id"]] = (message, call)
