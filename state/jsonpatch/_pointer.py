"""RFC 6901 JSON Pointer tokens: escaping for producers of paths, strict parsing for the engine."""

from __future__ import annotations

import re
from functools import lru_cache

from ._errors import PatchFormatError

_BAD_ESCAPE = re.compile(r"~(?![01])")


def escape(token: str) -> str:
    """Encode a member name as a pointer token ('~' -> '~0', then '/' -> '~1')."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """Decode a pointer token; '~1' goes before '~0' so that '~01' becomes '~1', not '/'."""
    return token.replace("~1", "/").replace("~0", "~")


def parse_pointer(pointer: object) -> tuple[str, ...]:
    """Split a pointer into unescaped tokens; raises PatchFormatError when it is malformed."""
    if not isinstance(pointer, str):
        raise PatchFormatError(f"pointer must be a string, got {type(pointer).__name__}")
    return _parse(pointer)


@lru_cache(maxsize=4096)
def _parse(pointer: str) -> tuple[str, ...]:
    """Parse a pointer string, memoized because patches keep naming the same few paths."""
    if not pointer:
        return ()
    if pointer[0] != "/":
        raise PatchFormatError(f"pointer {pointer!r} must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    if "~" not in pointer:
        return tuple(tokens)
    if _BAD_ESCAPE.search(pointer):
        raise PatchFormatError(f"pointer {pointer!r} has a '~' not followed by '0' or '1'")
    return tuple(map(unescape, tokens))
