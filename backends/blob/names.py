"""Reversible, case-safe blob names for storage keys, within Azure's name limits.

A key's `/` stays `/` (so the portal shows folders and `list` maps to a name prefix); the
rest uses `a-z 0-9 - _ ~ % : @` as is plus two escapes: `!x` is the upper-case letter X and
`=hh` one UTF-8 byte in lower-case hex (everything else, `.` included: the service trims a
name's trailing dots). Names are lower-case ASCII, so keys that differ only in case never
get names that differ only in case. The code is per character and prefix-free, so a key
starts with a prefix exactly when its name starts with the prefix's name.

A name over 1,024 characters or 254 segments (Azure's limits) becomes a stem (the name's
first code words, within both limits) + `=#` + the key's sha256; the real key is kept in
the blob's envelope. Stems keep hashed names under the same prefixes as their keys.
"""

from __future__ import annotations

import hashlib
import string

from .._name_code import HEX, NameCode

MAX_NAME_CHARS = 1024
MAX_SEGMENTS = 254
HASH_MARK = "=#"

_CODE = NameCode(string.ascii_lowercase + string.digits + "-_~%:@", slash="/")
_DIGEST_CHARS = 64  # a sha256 in hex
_STEM_CHARS = MAX_NAME_CHARS - len(HASH_MARK) - _DIGEST_CHARS
_STEM_SLASHES = MAX_SEGMENTS - 1


def blob_name(key: str) -> str:
    """The blob name of a (validated) key: its reversible encoding, or a stem plus a hash."""
    words = _code_words(key)
    name = "".join(words)
    if len(name) <= MAX_NAME_CHARS and name.count("/") < MAX_SEGMENTS:
        return name
    return _stem(words) + HASH_MARK + hashlib.sha256(key.encode("utf-8")).hexdigest()


def list_prefix(prefix: str) -> str | None:
    """The name prefix every blob of a key starting with `prefix` has, hashed ones included.

    Listing it yields a superset (filter by the decoded key); None if no key can start
    with `prefix` (it is not valid Unicode).
    """
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError:
        return None
    words = _code_words(prefix)
    name = "".join(words)
    return name if len(name) <= _STEM_CHARS and name.count("/") <= _STEM_SLASHES else _stem(words)


def is_hashed(name: str) -> bool:
    """True for names made by hashing a long key (the key must be read from the blob)."""
    digest = name[-_DIGEST_CHARS:]
    return (
        len(name) >= len(HASH_MARK) + _DIGEST_CHARS
        and name[-_DIGEST_CHARS - len(HASH_MARK) : -_DIGEST_CHARS] == HASH_MARK
        and set(digest) <= HEX
    )


def key_for_name(name: str) -> str | None:
    """The key a non-hashed name encodes, or None for hashed or foreign names."""
    return _CODE.key(name, blob_name)


def _stem(words: list[str]) -> str:
    """The longest run of leading code words within the stem's length and segment limits."""
    length = slashes = 0
    for count, word in enumerate(words):
        slashes += word == "/"
        length += len(word)
        if length > _STEM_CHARS or slashes > _STEM_SLASHES:
            return "".join(words[:count])
    return "".join(words)


def _code_words(text: str) -> list[str]:
    return _CODE.words(text)
