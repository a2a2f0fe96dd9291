"""M365 `StoreItem` JSON (an object, a list or a scalar) as one of our documents: an object
is stored as itself (so an M365 `UserState` and our `state.user` are one document); any other
value, or an object holding the reserved member, is wrapped as `{"$m365": value}`."""

from __future__ import annotations

from typing import Any

from ..backends import FormatError

WRAPPED = "$m365"


def to_document(value: Any) -> dict[str, Any]:
    """The document that stores `value`."""
    if isinstance(value, dict) and WRAPPED not in value:
        return value
    return {WRAPPED: value}


def from_document(key: str, document: dict[str, Any]) -> Any:
    """The value `to_document` stored; `FormatError` for a document holding the reserved
    member beside others (written by something else, so its meaning is unknown)."""
    if WRAPPED not in document:
        return document
    if len(document) != 1:
        raise FormatError(key, f"has {WRAPPED!r} beside other members")
    return document[WRAPPED]
