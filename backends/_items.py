"""What the storage contract hands around: documents with their versions, the validated
writes primitives apply, and their per-key outcomes (shared by `_base` and `_commit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

ANY: Final = "*"
"""Precondition for an unconditional write."""


class _Conflict:
    __slots__ = ()

    def __repr__(self) -> str:
        return "CONFLICT"


CONFLICT: Final = _Conflict()
"""A primitive's outcome for a key whose precondition failed."""

Outcomes = dict[str, "str | _Conflict"]
"""What a write or delete primitive reports per key: its new etag (written; for a delete,
any str), `CONFLICT`, or nothing (not written, as when an atomic batch is refused)."""


@dataclass(slots=True)
class StoreItem:
    """A JSON document and its version.

    On `write`, `etag` is the precondition: a version string (write only if the stored
    version is still that one), `None` (only if the key does not exist) or `"*"` (always).
    `data` is the document's JSON bytes: on `read`, the stored ones where the backend has
    them at no cost (a change baseline), else None; on `write`, a caller that already holds
    `orjson.dumps(value)` passes it, and it is stored as is instead of serializing again.
    """

    value: dict[str, Any]
    etag: str | None = None
    data: bytes | None = field(default=None, compare=False)
    ttl: float | None = field(default=None, compare=False)
    """On `write`: seconds this document lives, overriding the batch's `ttl`. On `read`: the
    seconds it has left (None: it lives for good), so a backup can restore it with them; at
    most 0 on a store that removes an expired document a little late (Cosmos DB)."""


def remaining(expires_at: float | None, now: float) -> float | None:
    """The `ttl` a read reports for a document that expires at `expires_at` (Unix time)."""
    return None if expires_at is None else expires_at - now


@dataclass(slots=True)
class PreparedWrite:
    """A validated write handed to a primitive: the document's JSON bytes and the value they
    encode (for stores whose SDK takes the value, so nothing parses the bytes again), its
    precondition (an etag, None for create-only, `ANY`) and its write group. Primitives only
    read it (not frozen: a frozen dataclass costs a microsecond more to build, on every write)."""

    key: str
    data: bytes
    value: dict[str, Any]
    """The document `data` encodes, as the caller gave it (a read check's is empty)."""
    expected: str | None
    group: str
    ttl: float | None
    """Seconds the document lives (None: for good)."""
    check_only: bool = False
    """A read check, not a write: the precondition must hold, and nothing is written."""


def precondition_holds(expected: str | None, current: str | None) -> bool:
    """Whether a precondition holds given the stored etag (`current`, None if absent)."""
    if expected == ANY:
        return True
    if expected is None:
        return current is None
    return current == expected


class BuiltKeys(tuple[str, ...]):
    """Keys the framework built and validated itself (distinct, well-formed): `Storage.read`
    takes them as they are. The one internal path past the key checks of the public contract;
    not exported, so what outside callers pass (lists, tuples, any iterable) is checked."""

    __slots__ = ()


class BuiltWrites(dict[str, StoreItem]):
    """A write batch the framework built itself: keys validated when built, each item's
    `data` the `orjson` bytes of its value, already checked against the JSON rule, its etag a
    version string, None or `ANY`, and `unchanged` its read checks (keys validated too).
    `Storage.write` takes it without re-checking keys, etags or bytes; the storage's own
    guards (size, TTL, the reserved intent member, write groups) still apply. Not exported:
    a plain mapping (or any other subclass) goes through every check."""

    __slots__ = ("unchanged",)

    def __init__(self, unchanged: dict[str, str | None] | None = None) -> None:
        super().__init__()
        self.unchanged = unchanged
        """The batch's read checks (`Storage.write(unchanged=)`): pass this very mapping."""
