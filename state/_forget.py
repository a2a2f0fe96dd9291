"""Everything stored about one user on one channel: found through the user's own keys, exported
or forgotten with work proportional to that user's data, never to the store.

A user's documents are: the user bucket and every record under it (`U/...`: their activity
records and their index of sessions, `user_session`), and for each indexed session `S` of a
conversation `C`: `S` and everything under it (history head, pages and message ids, runs,
AG-UI thread documents) and the AG-UI owner record `C/agui-owner` when it names the user.
Conversation buckets (`C`) are shared by every member and are kept (an export leaves them
out): the delivery evidence a turn of the user may leave in them, as in the app bucket, names
no one and holds their replies sealed with the activity (`state/_seal.py`).

A forget first writes the marker `U/forgetting`, then deletes the user's documents pass after
pass until a pass finds none, and only then the index entries, each at the version that pass
read before it looked at the sessions (a turn that started a session again since rewrote its
entry: the delete is refused and another pass finds what it saved), then removes the marker. So
no session document outlives the entry that finds it. A turn of the user that read any of those
documents before they went is refused at its save (its read checks and versions no longer hold)
and re-runs on an empty state. A forget that dies half way leaves the marker, and the next
`forget_user` or `export_user` of that user (the reader that settles it) finishes the forget
first.

An index entry expires with the sessions it indexes (`state/_retention.py`); one that outlived
them (nothing of its sessions is stored) names the user still: a forget removes it, an export
leaves it out.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from ._backup import Progress, document_line, listing
from ._errors import StateError
from ._keys import conversation_key, forgetting_key, session_key, thread_owner_key, user_key
from ._keys import unescape_segment as _unescape
from .backends import ConflictError, Storage, StoreItem

PASSES = 8
"""How many passes a forget makes at most before it reports what is left: a pass finds only
what a turn of the user saved while the previous pass deleted."""
BATCH = 100
"""Keys read or deleted at a time."""


class UnknownUserError(StateError, LookupError):
    """Nothing is stored about the user on the channel (or it was forgotten)."""

    def __init__(self, channel_id: str, user_id: str) -> None:
        self.channel_id, self.user_id = channel_id, user_id
        super().__init__(
            f"nothing is stored about user {user_id!r:.80} on channel {channel_id!r:.80}"
        )


@dataclass(slots=True)
class UserDataReport:
    """What finding (and deleting) a user's documents cost: `documents` of theirs, found by
    `listed` keys listed and `read` keys read."""

    documents: int = 0
    listed: int = 0
    read: int = 0
    passes: int = 0


class _Finder:
    """Finds one user's documents, counting the keys it lists and reads."""

    def __init__(self, storage: Storage, channel: str, user: str, namespace: str | None) -> None:
        self.storage, self.channel, self.user, self.namespace = storage, channel, user, namespace
        self.root = user_key(channel, user, namespace=namespace)
        self.report = UserDataReport()
        self.interrupted = False
        """Whether `find` listed the marker of a forget that did not finish."""
        self.stale: list[str] = []
        """The index entries `find` found whose sessions have expired (nothing is stored of
        them): a forget deletes them, an export leaves them out."""
        self.seen: dict[str, None] = {}
        """Every conversation an earlier pass found indexed: its session is looked at again
        even once its entry is gone (a racing commit may finish after a pass deleted it)."""
        self.versions: dict[str, str] | None = None
        """The index entries' versions, read by `find(versions=True)` before it looked at
        their sessions: the entries a forget may delete once that look found nothing."""

    async def keys(self, prefix: str) -> list[str]:
        """The keys under `prefix`, counted."""
        found = [key async for key in listing(self.storage, prefix)]
        self.report.listed += len(found)
        return found

    async def read(self, keys: list[str]) -> dict[str, StoreItem]:
        """`keys` read a batch at a time, counted."""
        found: dict[str, StoreItem] = {}
        for start in range(0, len(keys), BATCH):
            batch = keys[start : start + BATCH]
            self.report.read += len(batch)
            found.update(await self.storage.read(batch))
        return found

    async def find(self, *, versions: bool = False) -> tuple[list[str], list[str]]:
        """The keys of the user's documents (the marker excluded) but their index entries,
        and the index entries; with `versions`, the entries' `versions` are read first (a
        session a turn starts after they were read rewrites its entry: see `forget_user`)."""
        own = await self.keys(self.root + "/")
        marker = forgetting_key(self.root)
        self.interrupted = marker in own
        sessions = [key for key in own if key.rsplit("/", 2)[-2] == "sessions"]
        self.versions = None
        if versions:
            read = await self.read(sessions)
            self.versions = {key: item.etag for key, item in read.items() if item.etag}
        found: list[str] = []
        buckets = [self.root]  # not listed: read to see whether they exist
        for entry in sessions:
            self.seen[_unescape(entry.rsplit("/", 1)[1])] = None
        stored: dict[str, int] = {}  # conversation -> how many documents of its session
        for conversation in self.seen:
            session = session_key(self.channel, conversation, self.user, namespace=self.namespace)
            before = len(found)
            found += await self.keys(session + "/")
            found += await self._conversation_records(conversation)
            stored[conversation] = len(found) - before
            buckets.append(session)
        existing = await self.read(buckets)
        for conversation, session in zip(self.seen, buckets[1:], strict=True):
            stored[conversation] += session in existing
        self.stale = [e for e in sessions if not stored[_unescape(e.rsplit("/", 1)[1])]]
        found += [key for key in buckets[1:] if key in existing]
        found += [key for key in own if key != marker and key not in sessions]
        if self.root in existing:
            found.append(self.root)
        return found, sessions

    async def _conversation_records(self, conversation: str) -> list[str]:
        """The records under the shared conversation that name the user: its AG-UI owner
        records."""
        head = conversation_key(self.channel, conversation, namespace=self.namespace)
        keys = [
            thread_owner_key(head),  # an agent's own owner record lies under it (`/{app}`)
            *await self.keys(thread_owner_key(head) + "/"),
        ]
        found = await self.read(keys)
        return [key for key in keys if key in found and _names(found[key].value, self.user)]


def _names(value: Any, user: str) -> bool:
    """Whether a stored record holds the user's id anywhere (as an account or owner id)."""
    if isinstance(value, dict):
        return any(_names(member, user) for member in value.values())
    if isinstance(value, list):
        return any(_names(member, user) for member in value)
    return isinstance(value, str) and value == user


async def forget_user(
    storage: Storage,
    channel_id: str,
    user_id: str,
    *,
    namespace: str | None = None,
    progress: Progress | None = None,
) -> UserDataReport:
    """Delete everything stored about `user_id` on `channel_id` (see the module docstring);
    `UnknownUserError` when nothing is, before anything is written."""
    finder = _Finder(storage, channel_id, user_id, namespace)
    marker = forgetting_key(finder.root)
    keys, entries = await finder.find()
    if not keys and not entries and not finder.interrupted:
        raise UnknownUserError(channel_id, user_id)
    await storage.write({marker: StoreItem({"started": time.time()}, "*")})
    for number in range(PASSES):
        if number:
            keys, entries = await finder.find(versions=True)
        if keys:
            await _delete_all(finder, keys, progress)
        elif finder.versions is not None and await _delete_entries(finder, progress):
            break
    await storage.delete([marker])
    return finder.report


async def _delete_entries(finder: _Finder, progress: Progress | None) -> bool:
    """Delete the index entries at the versions `find` read before it found none of their
    sessions; False when a turn rewrote one since (it started a session again: another pass
    finds it). Versions read after that look could be a new session's, left unindexed."""
    versions = finder.versions or {}
    try:
        await finder.storage.delete(list(versions), if_match=versions)
    except ConflictError:
        return False
    finder.report.documents += len(versions)
    finder.report.passes += 1
    if progress is not None:
        progress(len(versions))
    return True


async def _delete_all(finder: _Finder, keys: list[str], progress: Progress | None) -> None:
    """Delete `keys` a batch at a time, in their order; counted as one pass."""
    finder.report.passes += 1
    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        await finder.storage.delete(batch)
        finder.report.documents += len(batch)
        if progress is not None:
            progress(len(batch))


async def export_user(
    storage: Storage,
    channel_id: str,
    user_id: str,
    *,
    namespace: str | None = None,
    report: Callable[[UserDataReport], None] | None = None,
) -> AsyncIterator[bytes]:
    """Yield everything stored about `user_id` on `channel_id` as JSON lines, one document a
    line with its key, version and remaining TTL (the lines of `export_store`).
    `UnknownUserError` when nothing is, or when a forget of the user was under way (it is
    finished first). `report` is given what finding the documents cost."""
    finder = _Finder(storage, channel_id, user_id, namespace)
    documents, entries = await finder.find()
    keys = documents + [entry for entry in entries if entry not in finder.stale]
    if finder.interrupted:
        await forget_user(storage, channel_id, user_id, namespace=namespace)
        keys = []
    if not keys:
        raise UnknownUserError(channel_id, user_id)
    if report is not None:
        report(finder.report)
    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        found = await storage.read(batch)
        now = time.time()
        for key in batch:
            if key in found:
                yield document_line(key, found[key], now)
