"""Blocking file primitives of FileStorage: atomic replace, durable delete, head reads.

`replace_file` writes a temp file next to the target, fsyncs it and renames it over the
target, so a crash leaves the old or the new file, never a torn one; the rename is durable
once `fsync_directory` of the folder returns (one call for a whole batch of replaces).
A temp file's name carries a tag from its writer (FileStorage: the lock stripe it holds), so
a cleaner can tell whether a writer may still be at work on it. `read_head` learns a
document's key, etag and expiry without parsing its data.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

from .._envelope import UNKNOWN, Head, parse_head

TEMP_PREFIX = ".tmp-"
"""Temp files of writes in flight; like every name starting with `.`, never a key's file."""

_TEMP_SUFFIX_LENGTH = 1 + 32  # "-" and a uuid4 in hex

_HEAD_BYTES = 64 * 1024


def read_files(directory: Path, paths: list[Path]) -> list[bytes | None]:
    """Each whole file in `directory`, or None where it does not exist.

    Raises `FileNotFoundError` if `directory` itself is gone: then a missing file does not
    mean a missing key.
    """
    found = [_read_file(path) for path in paths]
    if None in found:
        os.stat(directory)
    return found


def read_head(path: Path) -> Head | None:
    """The file's head (without etag if it is not an envelope this reads), or None if missing."""
    try:
        with open(path, "rb") as file:
            raw = file.read(_HEAD_BYTES)
            head = parse_head(raw)
            if head is None or head.etag is None:  # not laid out by `wrap`, or a long head
                head = parse_head(raw + file.read())
    except FileNotFoundError:
        return None
    return head or UNKNOWN


def read_heads(paths: list[Path]) -> list[Head | None]:
    """`read_head` of each path, in one call."""
    return [read_head(path) for path in paths]


def temp_tag(name: str) -> str | None:
    """The writer's tag in a temp file name `replace_file` made, else None."""
    tag, suffix = name[len(TEMP_PREFIX) : -_TEMP_SUFFIX_LENGTH], name[-_TEMP_SUFFIX_LENGTH:]
    if not name.startswith(TEMP_PREFIX) or not tag or suffix[0] != "-":
        return None
    return tag


def replace_file(path: Path, raw: bytes, tag: str) -> None:
    """Atomically make `raw` the content of `path`, its bytes on disk (see module docstring:
    `fsync_directory` persists the rename).

    The temp file is named `.tmp-<tag>-<uuid4 hex>`.
    """
    temp = path.with_name(f"{TEMP_PREFIX}{tag}-{uuid.uuid4().hex}")
    try:
        with open(temp, "xb") as file:
            file.write(raw)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def remove_durably(path: Path) -> None:
    """Delete `path` if it exists and persist the deletion."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    fsync_directory(path.parent)


def remove(path: Path) -> bool:
    """Delete `path` if it exists, saying whether it did (not persisted: `fsync_directory`
    does that, once for a batch, where readers care)."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    return True


def remove_if_older(path: Path, max_age: float) -> None:
    """Delete `path` if it was last modified more than `max_age` seconds ago."""
    with contextlib.suppress(FileNotFoundError):
        if time.time() - os.stat(path).st_mtime > max_age:
            os.remove(path)


def fsync_directory(path: Path) -> None:
    """Persist the names in folder `path`: the renames and deletes made in it so far."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_file(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
