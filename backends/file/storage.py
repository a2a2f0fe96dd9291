"""Local-file storage: one envelope file per key, safe across processes.

File names come from `filenames` (reversible, lower-case, at most 255 bytes). Files sit in
the root folder, or, for a store given a write group rule, in their group's folder
(`layout`: a prefix inside one group is listed from that folder alone). Every write is
an atomic replace by a synced file (`fileio`), so a crash never leaves a torn document; one
fsync per folder a batch wrote makes its renames durable before the batch returns. A write
runs with its version check in one critical section under the key's `flock` (`filelock`), so
preconditions hold across tasks, instances and OS processes. Etags are uuid4 hex and never
repeat. A lock wait is bounded by `lock_timeout` and then raises `StorageUnavailableError`.
TTL is kept in the file as `meta.expires_at` (Unix time); documents expired on the storage's
`clock` read as absent, and `list` deletes them.

A writer killed mid-write leaves a `.tmp-<stripe>-<uuid>` file behind (never a torn
document). Such a file exists only while its writer holds the lock stripe named in it, so
opening a FileStorage (and every `list`) deletes each temp file whose stripe it can lock
at once: its writer is gone, whichever process it was, and nothing waits or guesses from
clocks. The cost is one directory listing per open. A temp file without a stripe of ours
(another version's) is deleted once it is `STALE_TEMP_SECONDS` old.

`from_url` takes `file:///absolute/dir`, `file://./relative/dir` or `file://../dir` and
refuses the rest at open time with `StorageConfigError`: a host (`file://host/dir`), `~`
(URLs are not shell paths, so it is not expanded: give the absolute path), a query or a
fragment (FileStorage has no URL options; pass keyword options to `open_storage`). The
root may not be empty, the filesystem root, or an existing non-directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import uuid
from collections.abc import AsyncIterator, Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import aiofiles.os

from .._base import Storage, WriteGroup, expired, whole_key
from .._envelope import Head, unwrap, wrap
from .._error_map import unavailable
from .._errors import FormatError, StorageConfigError
from .._items import (
    ANY,
    CONFLICT,
    Outcomes,
    PreparedWrite,
    StoreItem,
    precondition_holds,
    remaining,
)
from .._keys import KEYS_REMEMBERED, check_key
from . import fileio, layout
from .filelock import StripedFileLocks
from .filenames import HASHED_PREFIX, is_hashed, key_for_name, name_for_key, name_stem

T = TypeVar("T")

LOCK_DIR = ".locks"
STALE_TEMP_SECONDS = 3600.0
"""A temp file without a stripe of ours this old belongs to a writer that died."""
LOCK_TIMEOUT_SECONDS = 10.0
"""Default `lock_timeout`: how long a read-modify-write waits for a key's lock."""

_read_heads = aiofiles.os.wrap(fileio.read_heads)


class FileStorage(Storage):
    """Documents as files under `root`, which is created if missing.

    Reads run in the event loop's thread: reading a few documents from the page cache costs
    less than handing the batch to a worker thread. A write batch, which waits for fsync,
    is one worker-thread call holding the locks of all its keys.

    `lock_timeout` (seconds, default `LOCK_TIMEOUT_SECONDS`; 0 tries once) bounds each wait
    for a key's lock held by another process or instance; then `StorageUnavailableError`.
    Opening removes temp files of writers that died (see the module docstring).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        lock_timeout: float = LOCK_TIMEOUT_SECONDS,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
    ) -> None:
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self.root = _checked_root(root)
        if type(lock_timeout) not in (int, float) or not 0 <= lock_timeout < math.inf:
            raise StorageConfigError(
                f"lock_timeout must be a finite number of seconds >= 0, got {lock_timeout!r}"
            )
        self._locks = StripedFileLocks(self.root / LOCK_DIR, timeout=lock_timeout)
        self._rule = None if self.write_group is whole_key else layout.rule_name(self.write_group)
        """The write group rule this store is laid out by (`layout`); None: all in the root."""
        self._path: Callable[[str], Path] = lru_cache(maxsize=KEYS_REMEMBERED)(self._path_of)
        """The file of a (valid) key, remembered per key (it depends on the key alone)."""
        with unavailable(f"file storage: cannot open the directory {self.root}", (OSError,)):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                raise StorageConfigError(
                    f"file storage root {self.root} is not a directory"
                ) from exc
            (self.root / LOCK_DIR).mkdir(exist_ok=True)
            names = os.listdir(self.root)
            if layout.check_marker(self.root, self._rule) and self._rule is not None:
                self._adopt(names, self._rule)
                names = os.listdir(self.root)
            for folder, listed in [(self.root, names), *self._group_folders(names)]:
                self._remove_orphan_temps(folder, listed)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileStorage:
        """`file:///absolute/dir` or `file://./relative/dir` (also `../`); percent-escapes are
        decoded. Raises `StorageConfigError` for other forms (see the module docstring)."""
        scheme, separator, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
        if not separator or scheme.lower() != "file" or not rest:
            raise StorageConfigError(
                f"file storage URL must be file:///abs/dir or file://./rel/dir, got {url!r}"
            )
        marks = [i for i in (rest.find("?"), rest.find("#")) if i >= 0]
        if marks:
            extra = rest[min(marks) :]
            part = "query" if extra[0] == "?" else "fragment"
            raise StorageConfigError(
                f"file storage URL {url!r} has a {part} {extra!r}: FileStorage takes no URL"
                " options; pass them as keyword options, e.g. open_storage(url, lock_timeout=5)"
            )
        authority = rest.split("/", 1)[0]
        if authority.startswith("~"):
            raise StorageConfigError(
                f"file storage URL {url!r}: '~' is not expanded in a URL; give the absolute"
                " path, e.g. file:///home/me/state"
            )
        if authority not in ("", ".", ".."):
            raise StorageConfigError(
                f"file storage URL {url!r} names a host {authority!r}: use file:///abs/dir"
                " for an absolute path or file://./rel/dir for a relative one"
            )
        return cls(unquote(rest), **options)

    def path_for(self, key: str) -> Path:
        """The file holding `key`'s document (for tools and tests; never write it directly)."""
        return self._path(check_key(key))

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        what = f"file storage: cannot read {keys[0]!r}" + (" and more" if len(keys) > 1 else "")
        with unavailable(what, (OSError,)):  # in the loop's thread: see the class docstring
            raws = fileio.read_files(self.root, [self._path(key) for key in keys])
        now = self.clock.time()
        found = {}
        for key, raw in zip(keys, raws, strict=True):
            if raw is None:
                continue
            envelope = unwrap(key, raw)
            if envelope.etag is None:
                raise FormatError(key, "has no etag (it was not written by FileStorage)")
            if not expired(envelope.expires_at, now):
                ttl = remaining(envelope.expires_at, now)
                found[key] = StoreItem(envelope.data, envelope.etag, envelope.raw_data, ttl)
        return found

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        now = self.clock.time()

        def write_all() -> None:  # under every key's lock, in one worker-thread call
            replaced: set[Path] = set()  # the folders of the files replaced
            try:
                for write in writes:
                    expires_at = now + write.ttl if write.ttl is not None else None
                    etag = self._write_locked(write, expires_at, now)
                    outcomes[write.key] = CONFLICT if etag is None else etag
                    if etag is not None:
                        replaced.add(self._path(write.key).parent)
            finally:  # one fsync per folder persists every rename of the batch there
                for folder in replaced:
                    fileio.fsync_directory(folder)

        keys = [write.key for write in writes]
        what = f"cannot write {keys[0]!r}" + (" and more" if len(keys) > 1 else "")
        await self._locked(keys, what, write_all)

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        now = self.clock.time()

        def delete_all() -> None:  # under every key's lock, in one worker-thread call
            removed: set[Path] = set()  # the folders of the files removed
            try:
                for key in keys:
                    path, expected = self._path(key), if_match.get(key, ANY)
                    if expected != ANY and not _holds(key, expected, fileio.read_head(path), now):
                        outcomes[key] = CONFLICT
                    elif fileio.remove(path):
                        removed.add(path.parent)
            finally:  # one fsync per folder persists every removal of the batch there
                for folder in removed:
                    fileio.fsync_directory(folder)

        what = f"cannot delete {keys[0]!r}" + (" and more" if len(keys) > 1 else "")
        await self._locked(keys, what, delete_all)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        keys = []
        with unavailable(f"file storage: cannot list {self.root}", (OSError,)):
            candidates: dict[Path, str | None] = {}  # file -> key (None: read from the file)
            stem = name_stem(prefix)  # decode only the names that can hold such a key
            for folder, names in await asyncio.to_thread(self._folders_under, prefix, stem):
                for name in names:
                    # None for the store's own (dot) files, foreign ones, other keys' names
                    key = key_for_name(name) if name.startswith(stem) else None
                    if key.startswith(prefix) if key is not None else is_hashed(name):
                        candidates[folder / name] = key
                await asyncio.to_thread(self._remove_orphan_temps, folder, names)
            heads = await _read_heads(list(candidates))
            now = self.clock.time()
            for (path, key), head in zip(candidates.items(), heads, strict=True):
                if head is None:
                    continue  # deleted since listdir
                key = key or _key_of_hashed(path.name, head)
                if not key.startswith(prefix) or self._path(key) != path:
                    continue  # not where this store keeps that key (`layout`)
                if not expired(head.expires_at, now):
                    keys.append(key)
                else:
                    action = partial(self._remove_expired_locked, key, now)
                    await self._locked([key], f"cannot delete expired {key!r}", action)
        for key in sorted(keys):
            yield key

    def _folders_under(self, prefix: str, stem: str) -> list[tuple[Path, list[str]]]:
        """The folders that can hold keys under `prefix`, each with the names in it: the one
        group's folder for a prefix inside a group (`layout`), else the root and the group
        folders whose keys' names can start with `stem`."""
        group = self._group_under(prefix) if self._rule is not None else None
        if group is not None:
            folder = self.root / layout.folder_name(group)
            return [(folder, os.listdir(folder) if folder.is_dir() else [])]
        names = os.listdir(self.root)
        return [(self.root, names), *self._group_folders(names, stem)]

    def _group_folders(self, root_names: list[str], stem: str = "") -> list[tuple[Path, list[str]]]:
        """The group folders among the root's names whose keys' names can start with `stem`
        (a hashed folder's can), each with the names in it."""
        if self._rule is None:
            return []
        found = []
        for name in root_names:
            if layout.is_folder_name(name) and (
                name.startswith(stem) or stem.startswith(name) or name.startswith(HASHED_PREFIX)
            ):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    found.append((self.root / name, os.listdir(self.root / name)))
        return found

    def _adopt(self, names: list[str], rule: str) -> None:
        """Lay out a folder without `.layout` by `rule`: move each document that belongs in a
        group's folder there, under its key's lock, then write the marker."""
        for name, key in layout.members_in_root(self.root, names, self.group_of).items():
            move = partial(layout.move_in, self.root / name, self._path(key))
            self._locks.run_blocking([key], move)
        layout.write_marker(self.root, rule)

    async def _locked(self, keys: list[str], what: str, action: Callable[[], T]) -> T:
        with unavailable(f"file storage: {what}", (OSError,)):
            return await self._locks.run(keys, action)

    def _remove_orphan_temps(self, folder: Path, names: list[str]) -> None:
        """Delete the temp files among `names` in `folder` whose writer is gone (see module
        docstring)."""
        for name in names:
            if not name.startswith(fileio.TEMP_PREFIX):
                continue
            path, stripe = folder / name, fileio.temp_tag(name)
            if stripe is not None and self._locks.owns(stripe):
                self._locks.run_if_free(stripe, partial(fileio.remove, path))
            else:
                fileio.remove_if_older(path, STALE_TEMP_SECONDS)

    def _write_locked(
        self, write: PreparedWrite, expires_at: float | None, now: float
    ) -> str | None:
        """Under the key's lock: replace the document if the precondition holds; new etag.
        The caller persists the rename (`fileio.fsync_directory`) before it reports success."""
        path = self._path(write.key)
        expected = write.expected
        if expected != ANY and not _holds(write.key, expected, fileio.read_head(path), now):
            return None
        if path.parent != self.root:
            layout.make_folder(path.parent)
        etag = uuid.uuid4().hex
        raw = wrap(write.key, write.data, etag, expires_at=expires_at)
        fileio.replace_file(path, raw, tag=self._locks.stripe(write.key))
        return etag

    def _remove_expired_locked(self, key: str, now: float) -> None:
        path = self._path(key)
        head = fileio.read_head(path)
        if head is not None and head.key == key and expired(head.expires_at, now):
            fileio.remove_durably(path)

    def _path_of(self, key: str) -> Path:
        group = self.group_of(key)
        if self._rule is None or group == key:
            return self.root / name_for_key(key)
        return self.root / layout.folder_name(group) / name_for_key(key)


def _checked_root(root: object) -> Path:
    """`root` as an absolute path; `StorageConfigError` for an empty one or the file system root
    (which the store would fill with its own files)."""
    path = os.fspath(root) if isinstance(root, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path or "\x00" in path:
        raise StorageConfigError(f"file storage root must be a non-empty path, got {root!r}")
    absolute = Path(path).absolute()
    real = os.path.realpath(absolute)
    if os.path.dirname(real) == real:
        raise StorageConfigError(
            f"file storage root {path!r} is the file system root; give the store a directory"
            " of its own, e.g. file:///var/lib/my-bot/state"
        )
    return absolute


def _holds(key: str, expected: str | None, head: Head | None, now: float) -> bool:
    """Whether a precondition holds on the head of `key`'s file; a document expired at `now`
    counts as absent, and one naming another key (a copied file) as present in an unknown
    format."""
    if head is not None and head.key != key:
        return precondition_holds(expected, "")  # "": present, in an unknown format
    if head is None or expired(head.expires_at, now):
        return precondition_holds(expected, None)
    return precondition_holds(expected, head.etag or "")


def _key_of_hashed(name: str, head: Head) -> str:
    if head.key is None or name_for_key(head.key) != name:
        raise FormatError(name, "is a hashed file name whose file holds no matching key")
    return head.key
