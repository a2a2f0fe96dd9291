"""Reversible, portable file names for storage keys (one file per key; `layout` says in which
folder).

A name uses only `a-z 0-9 - _ . ~ @ %` plus three escapes: `!x` is the upper-case letter X,
`+` is `/`, and `=hh` is one UTF-8 byte in lower-case hex (everything else, and a leading
`.`). Names are therefore lower-case ASCII, so two keys never share a file on a
case-insensitive or normalizing file system, and never start with `.` (reserved for the
store's own files). A name longer than 255 bytes becomes `#` + the key's sha256; the real
key is kept inside the stored envelope.
"""

from __future__ import annotations

import hashlib
import string

from .._name_code import HEX, NameCode

MAX_NAME_BYTES = 255
HASHED_PREFIX = "#"

_CODE = NameCode(string.ascii_lowercase + string.digits + "-_.~@%", slash="+")
_HASHED_LENGTH = len(HASHED_PREFIX) + 64  # a sha256 in hex


def name_for_key(key: str) -> str:
    """The file name of a (validated) key: its reversible encoding, or a hash if too long."""
    name = _encode(key)
    if len(name) > MAX_NAME_BYTES:
        return HASHED_PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return name


def is_hashed(name: str) -> bool:
    """True for names made by hashing a long key (the key must be read from the file).

    Exactly `#` and 64 lower-case hex digits: other names starting with `#` (an editor's
    `#autosave#`) are foreign files, like every other name no key encodes.
    """
    return len(name) == _HASHED_LENGTH and name[0] == HASHED_PREFIX and set(name[1:]) <= HEX


def key_for_name(name: str) -> str | None:
    """The key a non-hashed name encodes, or None for hashed, internal or foreign names."""
    return _CODE.key(name, name_for_key)


def name_stem(prefix: str) -> str:
    """What the name of every key that starts with `prefix` starts with, unless the key's name
    is hashed: the code spells a key character by character."""
    return _encode(prefix)


def _encode(key: str) -> str:
    return "".join(_CODE.words(key, escape_first="."))
