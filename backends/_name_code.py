"""The character code behind file and blob names: reversible, lower-case, prefix-free.

A character of the verbatim set stands for itself, `/` for the name's own separator, an
upper-case ASCII letter X is `!x`, and anything else is `=hh` per UTF-8 byte (lower-case
hex). Names are therefore lower-case ASCII: keys that differ only in case never get names
that differ only in case. Each character codes alone, so a key starts with a prefix
exactly when its name starts with the prefix's name.
"""

from __future__ import annotations

import string
from collections.abc import Callable

from ._errors import InvalidKeyError
from ._keys import check_key

HEX = frozenset("0123456789abcdef")


class NameCode:
    """One spelling of the code: its verbatim characters and the word for `/`."""

    __slots__ = ("verbatim", "slash")

    def __init__(self, verbatim: str, slash: str) -> None:
        self.verbatim = frozenset(verbatim)
        self.slash = slash

    def words(self, text: str, *, escape_first: str = "") -> list[str]:
        """The code word of each character of `text` (`escape_first`: verbatim characters
        that are escaped anyway when they come first, such as a file name's leading dot)."""
        words = []
        for position, char in enumerate(text):
            if char == "/":
                words.append(self.slash)
            elif char in self.verbatim and not (position == 0 and char in escape_first):
                words.append(char)
            elif "A" <= char <= "Z":
                words.append("!" + char.lower())
            else:
                words.append("".join(f"={byte:02x}" for byte in char.encode("utf-8")))
        return words

    def key(self, name: str, canonical: Callable[[str], str]) -> str | None:
        """The key `name` spells, or None when it spells none or not as `canonical(key)`
        would (only one spelling of a key is its name)."""
        raw = bytearray()
        i = 0
        while i < len(name):
            char = name[i]
            if char == "!" and i + 1 < len(name) and name[i + 1] in string.ascii_lowercase:
                raw += name[i + 1].upper().encode()
                i += 2
            elif char == "=" and len(name) >= i + 3 and set(name[i + 1 : i + 3]) <= HEX:
                raw.append(int(name[i + 1 : i + 3], 16))
                i += 3
            elif char == self.slash or char in self.verbatim:
                raw += b"/" if char == self.slash else char.encode()
                i += 1
            else:
                return None
        try:
            key = check_key(raw.decode("utf-8"))
        except (UnicodeDecodeError, InvalidKeyError):
            return None
        return key if canonical(key) == name else None
