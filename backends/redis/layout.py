"""Where a storage key lives in Redis: namespace prefix, write-group hash tag, reversible escaping.

A key becomes `{namespace}:{{group}}rest` (no `namespace:` without a namespace), where
`group + rest == key` and `group` is the key's write group (given by the storage's
`write_group` function). Redis hashes only the text inside the braces, so the keys of one
write group share a cluster slot and can be written in one script. Each group's keys but its
own are indexed in `{namespace}:{{group}}#index`, a sorted set of their escaped `rest`s (no
key's `rest` starts with `#`): listing a prefix inside one group reads a range of it instead
of scanning the keyspace. See docs/redis.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from .._errors import StorageConfigError
from .._keys import KEYS_REMEMBERED, check_key

_ESCAPE = str.maketrans({"\\": "\\\\", "{": "\\(", "}": "\\)"})
_UNESCAPE = {"\\": "\\", "(": "{", ")": "}"}
_ESCAPED = re.compile(r"(?:[^\\{}]|\\[\\()])*", re.DOTALL)
_ESCAPE_SEQUENCE = re.compile(r"\\([\\()])")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
INDEX = "#index"
"""What follows `{namespace}:{{group}}` in the name of the group's index."""


class Place(NamedTuple):
    """Where a key's document lives (`redis_key`), its group's index, and its member there
    (empty for the group's own key, which is not indexed)."""

    redis_key: bytes
    index_key: bytes
    member: bytes


class KeyLayout:
    """Maps storage keys to Redis keys of one namespace and back."""

    def __init__(self, group_of: Callable[[str], str], namespace: str | None = None) -> None:
        if namespace is not None and (
            not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace
        ):
            raise StorageConfigError(
                f"Redis namespace must be a non-empty str without braces, got {namespace!r}"
            )
        self.group_of = group_of
        self.namespace = namespace
        self.prefix = f"{namespace}:" if namespace is not None else ""
        self.redis_key: Callable[[str], str] = lru_cache(maxsize=KEYS_REMEMBERED)(self._redis_key)
        """The Redis key holding a (valid) key's document, remembered per key."""

    def _redis_key(self, key: str) -> str:
        return self.place(key).redis_key.decode()

    def group_base(self, group: str) -> str:
        """`{namespace}:{{group}}`: what every Redis key of the group starts with."""
        return f"{self.prefix}{{{group.translate(_ESCAPE)}}}"

    def place(self, key: str) -> Place:
        """A (valid) key's `Place`, encoded as redis-py sends it."""
        group = self.group_of(key)
        base, rest = self.group_base(group), key[len(group) :].translate(_ESCAPE)
        return Place(f"{base}{rest}".encode(), f"{base}{INDEX}".encode(), rest.encode())

    def index_range(self, group: str, prefix: str) -> tuple[bytes, bytes, bytes]:
        """The group's index, and the lexicographic bounds (`ZRANGEBYLEX` syntax) of the
        members of the keys under `prefix`, a prefix that starts with `group + "/"`."""
        start = prefix[len(group) :].translate(_ESCAPE).encode()
        base = self.group_base(group)
        return f"{base}{INDEX}".encode(), b"[" + start, b"(" + start + b"\xff"  # not in UTF-8

    def storage_key(self, redis_key: bytes | str) -> str | None:
        """Invert `redis_key`; None for a Redis key this layout cannot have made."""
        try:
            text = redis_key.decode() if isinstance(redis_key, bytes) else redis_key
            if not text.startswith(self.prefix + "{"):
                return None
            group, brace, rest = text[len(self.prefix) + 1 :].partition("}")
            group, rest = _unescape(group), _unescape(rest)
            key = check_key(group + rest)
            return key if brace and self.group_of(key) == group else None
        except ValueError:  # UnicodeDecodeError and InvalidKeyError are ValueErrors
            return None

    def scan_pattern(self, prefix: str) -> str:
        """A SCAN MATCH pattern covering every Redis key whose storage key starts with `prefix`.

        A group is a run of whole segments, so it holds at least the key's first segment:
        the pattern is narrowed to that; callers filter the decoded keys by `prefix`.
        """
        stem = prefix.partition("/")[0]
        return _glob_escape(f"{self.prefix}{{{stem.translate(_ESCAPE)}") + "*"


def _unescape(text: str) -> str:
    """Invert the escaping; raises ValueError for text the escaping cannot have produced."""
    if not _ESCAPED.fullmatch(text):
        raise ValueError(f"not an escaped key part: {text[:80]!r}")
    return _ESCAPE_SEQUENCE.sub(lambda match: _UNESCAPE[match.group(1)], text)


def _glob_escape(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)
