"""Events in wire form: ag-ui models and caller-owned dicts become plain camelCase JSON dicts."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import orjson
from pydantic import BaseModel

from ._mirror_errors import MalformedEventError

__all__ = ["event_type", "json_copy", "require_str", "to_wire"]


def to_wire(event: BaseModel | Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The event as a wire dict, and whether the mirror owns it (may keep its values)."""
    if isinstance(event, BaseModel):
        return event.model_dump(mode="json", by_alias=True), True
    if isinstance(event, Mapping):
        return dict(event), False
    raise MalformedEventError(f"an event must be an object, got {type(event).__name__}")


def event_type(event: Mapping[str, Any]) -> str:
    """The event's type name; a missing or non-string type is malformed."""
    kind = event.get("type")
    if isinstance(kind, Enum):
        kind = kind.value
    if not isinstance(kind, str):
        raise MalformedEventError(f"an event needs a string 'type', got {kind!r}")
    return kind


def require_str(event: Mapping[str, Any], member: str) -> str:
    """A required string member of an event, or MalformedEventError naming it."""
    value = event.get(member)
    if not isinstance(value, str):
        raise MalformedEventError(f"{event.get('type')} needs a string {member!r}, got {value!r}")
    return value


def json_copy(value: Any, what: str) -> Any:
    """A private deep copy of a JSON value (dicts, lists, scalars), refusing anything else."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError as exc:
        raise MalformedEventError(f"{what} is not a JSON value: {exc}") from None
