"""The one stored format shared by all backends: a versioned envelope around the document.

`{"v": 1, "key": ..., "etag": ..., "meta": {"updated_at": ...}, "data": {...}}`. The key is
kept inside so stores that hash long names still know the real key; `etag` is present where
the store has no native version (files, memory).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import orjson

from ._errors import FormatError, InvalidValueError

FORMAT_VERSION = 1
_HEAD = b'{"v":%d,"key":' % FORMAT_VERSION


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded stored document: the user's data plus what the store keeps about it."""

    data: dict[str, Any]
    etag: str | None
    meta: dict[str, Any]


def dump_data(key: str, value: object) -> bytes:
    """Serialize a document; raises `InvalidValueError` unless it is a JSON object."""
    if not isinstance(value, dict):
        raise InvalidValueError(f"value for key {key!r} must be a dict, not {type(value).__name__}")
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise InvalidValueError(f"value for key {key!r} is not JSON-serializable: {exc}") from exc


def wrap(
    key: str,
    data: bytes,
    etag: str | None = None,
    *,
    expires_at: float | None = None,
    updated_at: float | None = None,
) -> bytes:
    """Build envelope bytes around already-serialized data, without re-encoding it.

    `expires_at` (Unix time) goes into `meta` for stores that keep TTL inside the document;
    `updated_at` (Unix time, default now) is when the document was written.
    """
    written = time.time() if updated_at is None else updated_at
    # orjson writes the datetime as isoformat() would, only faster
    fields: dict[str, object] = {"updated_at": datetime.fromtimestamp(written, timezone.utc)}
    if expires_at is not None:
        fields["expires_at"] = expires_at
    meta = orjson.dumps(fields)
    etag_part = b',"etag":' + orjson.dumps(etag) if etag is not None else b""
    parts = (_HEAD, orjson.dumps(key), etag_part, b',"meta":', meta, b',"data":', data, b"}")
    return b"".join(parts)


def unwrap(key: str, raw: bytes | str) -> Envelope:
    """Parse envelope bytes; raises `FormatError` for anything but a known format version."""
    try:
        envelope = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FormatError(key, f"is not valid JSON ({exc})") from exc
    if not isinstance(envelope, dict) or "v" not in envelope:
        raise FormatError(key, "is not an agent-state envelope (it has no format version)")
    version = envelope["v"]
    if type(version) is not int or version != FORMAT_VERSION:
        newer = type(version) is int and version > FORMAT_VERSION
        raise FormatError(
            key,
            f"has {'newer' if newer else 'unknown'} format version {version!r}; "
            f"this reader knows version {FORMAT_VERSION} only",
        )
    data, etag, meta = envelope.get("data"), envelope.get("etag"), envelope.get("meta")
    if not isinstance(data, dict) or not isinstance(meta, dict):
        raise FormatError(key, "is a version-1 envelope without a 'data' and a 'meta' object")
    if etag is not None and not isinstance(etag, str):
        raise FormatError(key, "has a non-string etag")
    return Envelope(data, etag, meta)
