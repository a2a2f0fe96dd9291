"""Validation of storage keys: the shape every backend accepts, checked before any I/O."""

from __future__ import annotations

from collections.abc import Iterable

from ._errors import InvalidKeyError

KEYS_REMEMBERED = 8192
"""How many keys each per-key cache keeps: valid keys here, and what a storage derives
from a key alone (its write group, its file)."""


def check_key(key: object) -> str:
    """Return `key` if it is a well-formed storage key, else raise `InvalidKeyError`.

    A key is `/`-joined segments; no segment may be empty, `.` or `..`, nor hold NUL,
    so no key can name a parent, an absolute path or a truncated C string in any store.
    """
    if type(key) is str:
        return key if key in _REMEMBERED else _remember(key)
    if not isinstance(key, str):
        raise InvalidKeyError(f"storage key must be a str, not {type(key).__name__}")
    return _valid(key)  # a str subclass is checked every time, never remembered


_REMEMBERED: dict[str, None] = {}
"""Plain-str keys that passed, at most `KEYS_REMEMBERED`, emptied when full: unlike an LRU
cache's table, which a scan of many keys (a store-wide export) rebuilds while the old one
is still held, this set's memory peaks at the same size whatever the number of keys."""


def _remember(key: str) -> str:
    """Check `key` and remember it (only keys that pass: a refusal raises)."""
    _valid(key)
    if len(_REMEMBERED) >= KEYS_REMEMBERED:
        _REMEMBERED.clear()
    _REMEMBERED[key] = None
    return key


def _valid(key: str) -> str:
    """`check_key` for a str, every time."""
    if not key:
        raise InvalidKeyError("storage key is empty")
    if "\x00" in key:
        raise InvalidKeyError(f"storage key {key[:80]!r} contains NUL")
    wrapped = f"/{key}/"  # so every segment, the first and last too, sits between slashes
    if "//" in wrapped or "/./" in wrapped or "/../" in wrapped:
        raise InvalidKeyError(f"storage key {key[:80]!r} has an empty, '.' or '..' segment")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(f"storage key {key[:80]!r} is not valid Unicode") from exc
    return key


def check_keys(keys: Iterable[str]) -> list[str]:
    """Validate a batch of keys (a lone str is refused: it would iterate as characters, and
    so is None or anything else that is no iterable of keys)."""
    if isinstance(keys, (str, bytes)):
        raise InvalidKeyError("pass a list of keys, not a single string")
    try:
        batch = iter(keys)
    except TypeError:
        raise InvalidKeyError(f"pass a list of keys, not {type(keys).__name__}") from None
    remembered = _REMEMBERED
    return [key if type(key) is str and key in remembered else check_key(key) for key in batch]


def check_prefix(prefix: object) -> str:
    """Validate a `list` prefix: any str without NUL (it need not end on a segment)."""
    if not isinstance(prefix, str) or "\x00" in prefix:
        raise InvalidKeyError(f"list prefix must be a str without NUL, got {prefix!r:.80}")
    return prefix
