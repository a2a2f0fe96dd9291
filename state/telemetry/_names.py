"""The names telemetry gives: span names, attribute keys, the scope a storage key belongs to."""

from __future__ import annotations

from functools import lru_cache

from .. import parse_key, unescape_segment
from ..backends import InvalidKeyError

TURN_SPAN = "agent_state.turn"
AGUI_SPAN = "agent_state.agui.run"
STORAGE_SPANS = {op: f"agents.storage.{op}" for op in ("read", "write", "delete")}
"""Named like the Microsoft 365 Agents SDK's storage spans."""

OPERATION = "storage.operation"
KEY_COUNT = "storage.keys.count"
BACKEND = "storage.backend"
BYTES = "storage.bytes"
SCOPES_READ = "agent_state.scopes.read"
SCOPES_WRITTEN = "agent_state.scopes.written"
ATTEMPT = "agent_state.attempt"
CONFLICT = "agent_state.conflict"
MERGED = "agent_state.merged"
REDELIVERY = "agent_state.redelivery"


@lru_cache(maxsize=4096)
def scope_of(key: str) -> str:
    """The scope of a storage key (`user`, `session`, ...), with or without a namespace;
    `other` for keys of another scheme."""
    parts = key.split("/")
    for namespace in (None, parts[0]):
        try:
            name = None if namespace is None else unescape_segment(namespace)
            return parse_key(key, namespace=name).scope
        except InvalidKeyError:
            continue
    return "other"
