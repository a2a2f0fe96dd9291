"""The error types every backend raises, so callers handle one set whatever the store."""

from __future__ import annotations

from collections.abc import Iterable


class StorageError(Exception):
    """Base class of every error raised by a storage backend. A `write` that raises one
    wrote nothing of its batch (a `StorageUnavailableError` may leave it in doubt: then
    readers see the whole batch or none of it)."""


class InvalidKeyError(StorageError, ValueError):
    """A key is empty, not a string, or has a segment that is empty, `.`, `..` or holds NUL."""


class InvalidValueError(StorageError, TypeError):
    """A value is not a JSON object of JSON-serializable data."""


class StateTooLargeError(StorageError):
    """A document is larger than the backend accepts; raised before anything is written."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        super().__init__(
            f"document for key {key!r} is {size} bytes; this backend's limit is {limit}"
        )
        self.key = key
        self.size = size
        self.limit = limit


class FormatError(StorageError):
    """A stored document is not an envelope this version understands; it is left untouched."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"stored document for key {key!r} {reason}")
        self.key = key
        self.reason = reason


class ConflictError(StorageError):
    """A precondition failed: a stored version moved on, or a create met an existing key.

    `keys` names every key whose precondition failed, and every key a refused commit through
    intents put back under a new version (the same document): so a retry that reads anew
    the keys named holds the current version of every key. Nothing of the batch was written.
    """

    def __init__(self, keys: Iterable[str], message: str | None = None) -> None:
        self.keys = sorted(keys)
        detail = message or "precondition failed"
        super().__init__(f"{detail} for key(s) {', '.join(map(repr, self.keys))}")


class StorageUnavailableError(StorageError):
    """The store could not be reached or failed (I/O or SDK error); the cause is chained."""


class StorageConfigError(StorageError, ValueError):
    """A storage URL or option is malformed or names an unknown backend."""
