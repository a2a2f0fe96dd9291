"""Cosmos DB item ids and partition key values for storage keys.

Ids may not hold `/ \\ ? #` and are limited to 255 characters. A key maps to a readable id:
`/` becomes `|`, letters, digits and `-_.:@~` stay, every other character becomes `!` and
the hex of its UTF-8 bytes (`!7C` for `|`, `!21` for `!`). An id that would be longer than
255 characters is `!h` plus the SHA-256 of the key instead; encoded ids never hold `!h`,
so two keys never share an id (the real key is inside the item either way). A partition
key value (the key's write group) is kept as is up to 2 KB, the service's limit, and
hashed the same way beyond.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import string

MAX_ID_CHARS = 255
MAX_PARTITION_KEY_BYTES = 2048
HASHED = "!h"

_SAFE = frozenset(string.ascii_letters + string.digits + "-_.:@~")
_PLAIN = re.compile(r"[A-Za-z0-9\-_.:@~/]*")
_ESCAPES = re.compile(r"((?:![0-9A-F]{2})+)")


def item_id(key: str) -> str:
    """The item id of a (valid) storage key."""
    if _PLAIN.fullmatch(key):
        encoded = key.replace("/", "|")
    else:
        encoded = "".join(_encode(char) for char in key)
    return encoded if len(encoded) <= MAX_ID_CHARS else HASHED + _digest(key)


def key_of_id(item: str) -> str | None:
    """The key a readable id stands for; None for a hashed id (its item holds the key)."""
    if item.startswith(HASHED):
        return None
    parts = _ESCAPES.split(item)  # plain text and runs of escapes, alternating
    return "".join(
        bytes.fromhex(part.replace("!", "")).decode() if odd else part.replace("|", "/")
        for odd, part in zip(itertools.cycle((False, True)), parts)
    )


def partition_value(group: str) -> str:
    """The partition key value of a write group: the group, or its hash beyond 2 KB."""
    if len(group) * 4 <= MAX_PARTITION_KEY_BYTES or len(group.encode()) <= MAX_PARTITION_KEY_BYTES:
        return group
    return HASHED + _digest(group)


def _encode(char: str) -> str:
    if char in _SAFE:
        return char
    if char == "/":
        return "|"
    return "".join(f"!{byte:02X}" for byte in char.encode())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
