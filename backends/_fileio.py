"""Blocking file primitives of FileStorage, run in worker threads: durable replace, head reads.

`replace_durably` writes a temp file next to the target, fsyncs it, renames it over the
target and fsyncs the directory, so a crash leaves the old or the new file, never a torn one.
`read_head` learns a document's key, etag and expiry without parsing its data.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

from ._envelope import FORMAT_VERSION

TEMP_PREFIX = ".tmp-"
"""Temp files of writes in flight; like every name starting with `.`, never a key's file."""

_HEAD_BYTES = 64 * 1024
_DATA_MARK = b',"data":'  # `wrap` writes v, key, etag and meta before the data


@dataclass(frozen=True, slots=True)
class Head:
    """What a stored file says besides its data.

    `etag` is None for a format this can't read; `key` is then the key it names, if any, so a
    hashed file name of a newer format still gives its key back to `list`.
    """

    key: str | None
    etag: str | None
    expires_at: float | None

    def alive(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


UNKNOWN = Head(None, None, None)


def is_expiry(value: object) -> bool:
    """True for a valid `meta.expires_at`: absent (None) or a Unix time."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def read_files(directory: Path, paths: list[Path]) -> list[bytes | None]:
    """Each whole file in `directory`, or None where it does not exist (one thread hop per batch).

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
            end = raw.find(_DATA_MARK)
            head = _parse_head(raw[:end] + b"}") if end > 0 else None
            if head is None or head.etag is None:  # not laid out by `wrap`, or a long head
                head = _parse_head(raw + file.read())
    except FileNotFoundError:
        return None
    return head or UNKNOWN


def read_heads(paths: list[Path]) -> list[Head | None]:
    """`read_head` of each path, in one call."""
    return [read_head(path) for path in paths]


def replace_durably(path: Path, raw: bytes) -> None:
    """Atomically make `raw` the content of `path` and persist it (see module docstring)."""
    temp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex}")
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
    fsync_directory(path.parent)


def remove_durably(path: Path) -> None:
    """Delete `path` if it exists and persist the deletion."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    fsync_directory(path.parent)


def remove_stale(paths: list[Path], max_age: float) -> None:
    """Delete those of `paths` last modified more than `max_age` seconds ago."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if time.time() - os.stat(path).st_mtime > max_age:
                os.remove(path)


def fsync_directory(path: Path) -> None:
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


def _parse_head(raw: bytes) -> Head | None:
    """The head of a JSON object (without etag if it is no readable envelope); None if no object."""
    try:
        fields = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(fields, dict):
        return None
    key, etag, meta = fields.get("key"), fields.get("etag"), fields.get("meta")
    if not isinstance(key, str):
        return UNKNOWN
    version = fields.get("v")
    if type(version) is not int or version != FORMAT_VERSION or not isinstance(meta, dict):
        return Head(key, None, None)
    if not (isinstance(etag, str) and is_expiry(meta.get("expires_at"))):
        return Head(key, None, None)
    return Head(key, etag, meta.get("expires_at"))
