"""Where a storage key lives in Redis: namespace prefix, slot-group hash tag, reversible escaping.

A key becomes `{namespace}:{{group}}rest` (no `namespace:` without a namespace), where
`group + rest == key` and `group` is the key's slot group: the conversation key for conversation
and session keys, the whole key otherwise. Redis hashes only the text inside the braces, so a
conversation and all its sessions share one cluster slot. See docs/redis.md.
"""

from __future__ import annotations

import re

from ._errors import StorageConfigError
from ._keys import check_key

_CONVERSATION = r".+/conversations/[^/]+"
_GROUP = re.compile(rf"({_CONVERSATION})(?:/users/[^/]+)?", re.DOTALL)
_CONVERSATION_KEY = re.compile(_CONVERSATION, re.DOTALL)
_ESCAPE = str.maketrans({"\\": "\\\\", "{": "\\(", "}": "\\)"})
_UNESCAPE = {"\\": "\\", "(": "{", ")": "}"}
_ESCAPED = re.compile(r"(?:[^\\{}]|\\[\\()])*", re.DOTALL)
_ESCAPE_SEQUENCE = re.compile(r"\\([\\()])")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
_USERS = "/users/"


def slot_group(key: str) -> str:
    """The part of `key` that picks its cluster slot: keys with the same group share a slot."""
    match = _GROUP.fullmatch(key)
    return match.group(1) if match else key


class KeyLayout:
    """Maps storage keys to Redis keys of one namespace and back."""

    def __init__(self, namespace: str | None = None) -> None:
        if namespace is not None and (
            not isinstance(namespace, str) or not namespace or "{" in namespace or "}" in namespace
        ):
            raise StorageConfigError(
                f"Redis namespace must be a non-empty str without braces, got {namespace!r}"
            )
        self.namespace = namespace
        self.prefix = f"{namespace}:" if namespace is not None else ""

    def redis_key(self, key: str) -> str:
        """The Redis key holding `key`'s document."""
        group = slot_group(key)
        return f"{self.prefix}{{{group.translate(_ESCAPE)}}}{key[len(group) :].translate(_ESCAPE)}"

    def storage_key(self, redis_key: bytes | str) -> str | None:
        """Invert `redis_key`; None for a Redis key this layout cannot have made."""
        try:
            text = redis_key.decode() if isinstance(redis_key, bytes) else redis_key
            if not text.startswith(self.prefix + "{"):
                return None
            group, brace, rest = text[len(self.prefix) + 1 :].partition("}")
            group, rest = _unescape(group), _unescape(rest)
            key = check_key(group + rest)
        except ValueError:  # UnicodeDecodeError and InvalidKeyError are ValueErrors
            return None
        return key if brace and slot_group(key) == group else None

    def scan_pattern(self, prefix: str) -> str:
        """A SCAN MATCH pattern covering every Redis key whose storage key starts with `prefix`.

        The closing brace may fall inside `prefix` (after a conversation id), so the pattern
        stops at the first place it could; callers filter the decoded keys by `prefix`.
        """
        stem = prefix[: _earliest_group_end(prefix)]
        return _glob_escape(f"{self.prefix}{{{stem.translate(_ESCAPE)}") + "*"


def _earliest_group_end(prefix: str) -> int:
    """Where the first possible group boundary inside `prefix` is (its length if none)."""
    for end, char in enumerate(prefix):
        if char == "/" and _CONVERSATION_KEY.fullmatch(prefix[:end]):
            after = prefix[end + len(_USERS) :]
            if "/" not in after and (_USERS + after).startswith(prefix[end:]):
                return end  # prefix[end:] can be the start of a session's "/users/{user}"
    return len(prefix)


def _unescape(text: str) -> str:
    """Invert the escaping; raises ValueError for text the escaping cannot have produced."""
    if not _ESCAPED.fullmatch(text):
        raise ValueError(f"not an escaped key part: {text[:80]!r}")
    return _ESCAPE_SEQUENCE.sub(lambda match: _UNESCAPE[match.group(1)], text)


def _glob_escape(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)
