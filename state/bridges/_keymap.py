"""Outside keys (any non-empty string) mapped one-to-one onto our key shape: each `/`-separated
segment escaped like an id (`escape_segment`), an empty segment written `%2F` (a lone `/`,
which no segment between slashes can hold), so keys that need no escaping stay as they are."""

from __future__ import annotations

from .. import escape_segment, unescape_segment

EMPTY_SEGMENT = "%2F"


def to_storage_key(key: object, namespace: str | None) -> str:
    """Our key for an outside key; `ValueError` for anything but a non-empty str."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"keys must be non-empty strings, got {key!r:.80}")
    segments = [escape_segment(part) if part else EMPTY_SEGMENT for part in key.split("/")]
    if namespace is not None:
        segments.insert(0, escape_segment(namespace, what="namespace"))
    return "/".join(segments)


def from_storage_key(key: str, namespace: str | None) -> str:
    """The outside key `to_storage_key` mapped to `key` (`InvalidKeyError` if none did)."""
    segments = key.split("/")
    if namespace is not None:
        if segments[0] != escape_segment(namespace, what="namespace"):
            raise ValueError(f"key {key!r:.80} is not in namespace {namespace!r}")
        segments = segments[1:]
    return "/".join("" if part == EMPTY_SEGMENT else unescape_segment(part) for part in segments)
