"""Retention that cascades: every document of a session expires when its bucket does.

A session scope with a `ttl` gives its session one expiry, kept as the bucket's own TTL. A
save that writes any document of the session (the bucket, its history, runs, AG-UI sent
state, the thread's owner record) writes the bucket too (unchanged if need be) and gives
every document it writes that same expiry, so two writers of a session always meet on its
bucket's version. While the expiry lies at least the scope's `ttl` ahead (and past what a
pending run of the batch `holds`: its lease), nothing else is written: the documents already
stored expire with the bucket. Once it comes closer, the save renews the session: the new
expiry is that much later again (`ttl` beyond what is needed), and every stored document of
the session is rewritten with it in the same all-or-nothing batch. A session is renewed at
most once per `ttl` of its life, and a turn's own writes never grow with its history.
"""

from __future__ import annotations

import time

from ._document import Document
from ._keys import session_index_key, session_members
from .backends import Storage, StoreItem

RENEW_BATCH = 100
"""Documents read at a time when a session is renewed."""


async def give_expiry(
    storage: Storage,
    documents: list[Document],
    pending: dict[str, tuple[Document, StoreItem]],
    read: dict[str, Document],
) -> dict[str, StoreItem]:
    """Give the session documents among the writes of a save of `documents` (`pending`, key
    -> (document, write); `read`: the documents only read) their session's expiry, in place:
    a session bucket written for it joins `pending` (leaving `read`). Returns the further
    writes: those that renew a session's stored documents (none unless one is due), and the
    user's index entry of a session given a new expiry or started by the save, living as
    long as the session."""
    renewals: dict[str, StoreItem] = {}
    buckets = [
        document
        for document in documents
        if document.kind == "session"
        and (document.ttl is not None or document.expires_at is not None)
        and document.key is not None
    ]
    for bucket in buckets:  # a turn of a class without the TTL keeps the stored expiry
        session, ttl = str(bucket.key), float(bucket.ttl or 0)
        prefix, owner, agents = session_members(session)
        members = [key for key in pending if _member(key, prefix, owner, agents)]
        if not members and session not in pending:
            continue
        now = time.time()
        holds = max((h for k in members if (h := pending[k][0].holds) is not None), default=0.0)
        needed = now + max(ttl, holds)
        expires_at = bucket.expires_at if bucket.etag is not None else None
        due = expires_at is None or expires_at < needed
        if due:
            expires_at = needed + ttl
        assert expires_at is not None
        if session not in pending:
            pending[session] = (bucket, bucket.kept_write())
            read.pop(session, None)
        left = expires_at - now
        for key in (session, *members):
            pending[key][1].ttl = left
        if due or any(pending[k][1].etag is None and session_index_key(k) for k in members):
            await _index_entry(storage, session, renewals, left)
        if due and bucket.etag is not None:
            await _renew(storage, session, pending, read, renewals, left)
    return renewals


async def _index_entry(
    storage: Storage, session: str, renewals: dict[str, StoreItem], left: float
) -> None:
    """Add the write of the user's index entry of `session` (written in the batch that starts
    a session, `save_documents`) living at least `left` seconds: as long as the longest-lived
    session of the conversation it indexes (one entry for every agent's session there), for
    good while one of them has no TTL; conditional on the version read."""
    entry, indexed = session_index_key(session) or (None, "")
    if entry is None:
        return
    stored = (await storage.read([entry])).get(entry)
    ttl: float | None = left
    etag = None
    if stored is not None:
        ttl = None if stored.ttl is None else max(left, stored.ttl)
        etag = stored.etag
    renewals[entry] = StoreItem({"session": indexed}, etag, ttl=ttl)


def _member(key: str, prefix: str, owner: str, agents: str | None) -> bool:
    """Whether `key` is a document of the session `session_members` described."""
    if key == owner:
        return True
    return key.startswith(prefix) and not (agents is not None and key.startswith(agents))


async def _renew(
    storage: Storage,
    session: str,
    pending: dict[str, tuple[Document, StoreItem]],
    read: dict[str, Document],
    renewals: dict[str, StoreItem],
    left: float,
) -> None:
    """Add a write of every stored document of `session` the save does not write yet, each
    conditional on the version read (the turn's own, for a document the turn read), with
    `left` seconds to live."""
    prefix, owner, agents = session_members(session)
    keys = [
        key
        async for key in storage.list(prefix)
        if key not in pending and not (agents is not None and key.startswith(agents))
    ]
    if owner not in pending:
        keys.append(owner)
    for start in range(0, len(keys), RENEW_BATCH):
        found = await storage.read(keys[start : start + RENEW_BATCH])
        for key, item in found.items():
            document = read.pop(key, None)
            if document is not None:
                write = document.kept_write()
                write.ttl = left
                pending[key] = (document, write)
            else:
                renewals[key] = StoreItem(item.value, item.etag, item.data, ttl=left)
