"""The one stored format shared by all backends: a versioned envelope around the document.

`{"v": 1, "key": ..., "etag": ..., "meta": {"updated_at": ..., "expires_at": ...}, "data": {...}}`.
The key is kept inside so stores that hash long names still know the real key (and a
document copied under another key is refused); `etag` is present where the store has no
native version (files, memory); `expires_at` where the store keeps TTL in the document.
`wrap` writes `data` last, so its bytes can be sliced back out without re-encoding.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import orjson

from ._errors import FormatError, InvalidValueError
from ._json import JsonRuleError, encode_json

FORMAT_VERSION = 1
_HEAD = b'{"v":%d,"key":' % FORMAT_VERSION
_DATA_MARK = b',"data":'  # cannot occur inside a JSON string: its '"' would be escaped
_META_NOW = b',"meta":{"updated_at":"2026-01-01T00:00:00.000000+00:00"}'  # its length


@dataclass(slots=True)
class Envelope:
    """A decoded stored document: the user's data plus what the store keeps about it (not
    frozen: every read builds one, and a frozen dataclass costs a microsecond more).

    `raw_data` is the stored JSON bytes of `data` when the envelope was laid out by `wrap`
    (a change baseline for callers), else None.
    """

    data: dict[str, Any]
    etag: str | None
    expires_at: float | None
    raw_data: bytes | None


@dataclass(frozen=True, slots=True)
class Head:
    """What an envelope says besides its data, read without decoding the data.

    `etag` is None for a format this can't read; `key` is then the key it names, if any, so
    a hashed name of a newer format still gives its key back to `list`.
    """

    key: str | None
    etag: str | None
    expires_at: float | None


UNKNOWN = Head(None, None, None)


def dump_data(key: str, value: object) -> bytes:
    """Serialize a document; raises `InvalidValueError` unless it is a JSON object (by the
    one JSON rule of `_json`)."""
    if not isinstance(value, dict):
        raise InvalidValueError(f"value for key {key!r} must be a dict, not {type(value).__name__}")
    try:
        return encode_json(value)
    except JsonRuleError as exc:
        raise InvalidValueError(f"value for key {key!r} is not JSON: {exc}") from None


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
    parts = (_HEAD, orjson.dumps(key), etag_part, b',"meta":', meta, _DATA_MARK, data, b"}")
    return b"".join(parts)


def envelope_fields(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """The envelope of `value` as the fields `wrap` writes (no etag, no expiry), for stores
    whose SDK takes a JSON object: the value is used as is, never encoded or parsed here."""
    updated_at = datetime.fromtimestamp(time.time(), timezone.utc).isoformat()
    return {"v": FORMAT_VERSION, "key": key, "meta": {"updated_at": updated_at}, "data": value}


def envelope_size(key: str, data: bytes) -> int:
    """The length of `wrap(key, data)`'s bytes, without building them."""
    return len(_HEAD) + len(orjson.dumps(key)) + len(_META_NOW) + len(_DATA_MARK) + len(data) + 1


def unwrap(key: str, raw: bytes | str) -> Envelope:
    """Parse the envelope stored at `key`; `FormatError` for an unknown format version, a
    malformed envelope, or one that names another key."""
    raw = raw.encode() if isinstance(raw, str) else raw
    try:
        envelope = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FormatError(key, f"is not valid JSON ({exc})") from exc
    if not isinstance(envelope, dict) or "v" not in envelope:
        raise FormatError(key, "is not an agent-state envelope (it has no format version)")
    _check_version(key, envelope["v"])
    data, etag, meta = envelope.get("data"), envelope.get("etag"), envelope.get("meta")
    if not isinstance(data, dict) or not isinstance(meta, dict):
        raise FormatError(key, "is a version-1 envelope without a 'data' and a 'meta' object")
    if etag is not None and not isinstance(etag, str):
        raise FormatError(key, "has a non-string etag")
    expires_at = meta.get("expires_at")
    if not _is_expiry(expires_at):
        raise FormatError(key, f"has a bad meta.expires_at {expires_at!r}")
    if envelope.get("key") != key:
        raise FormatError(key, f"belongs to another key ({str(envelope.get('key'))[:80]!r})")
    return Envelope(data, etag, expires_at, _data_bytes(raw))


def parse_head(raw: bytes) -> Head | None:
    """The head of envelope bytes (or of their first part, if it holds the whole head).

    None when `raw` does not hold a complete head: pass more of the document. A document
    that is not a readable envelope gives a head without etag.
    """
    end = raw.find(_DATA_MARK)
    head = _parse_head(raw[:end] + b"}") if end > 0 else None
    if head is None or head.etag is None:  # not laid out by `wrap`: parse all that is there
        head = _parse_head(raw)
    return head


def _data_bytes(raw: bytes) -> bytes | None:
    """`data`'s bytes in an envelope laid out by `wrap` (`data` last, compact), else None."""
    if not raw.startswith(_HEAD) or not raw.endswith(b"}"):
        return None
    start = raw.find(_DATA_MARK)
    return raw[start + len(_DATA_MARK) : -1] if start > 0 else None


def _check_version(key: str, version: object) -> None:
    if type(version) is not int or version != FORMAT_VERSION:
        newer = type(version) is int and version > FORMAT_VERSION
        raise FormatError(
            key,
            f"has {'newer' if newer else 'unknown'} format version {version!r}; "
            f"this reader knows version {FORMAT_VERSION} only",
        )


def _is_expiry(value: object) -> bool:
    """True for a valid `meta.expires_at`: absent (None) or a Unix time."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _parse_head(raw: bytes) -> Head | None:
    """The head of a JSON object (without etag if it is no readable envelope); None if no object."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(fields, dict):
        return None
    key, etag, meta = fields.get("key"), fields.get("etag"), fields.get("meta")
    if not isinstance(key, str):
        return UNKNOWN
    version = fields.get("v")
    if type(version) is not int or version != FORMAT_VERSION or not isinstance(meta, dict):
        return Head(key, None, None)
    if not (isinstance(etag, str) and _is_expiry(meta.get("expires_at"))):
        return Head(key, None, None)
    return Head(key, etag, meta.get("expires_at"))
