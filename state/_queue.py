"""Turn queues: in one process, the turns of one conversation run one at a time, in order.

Turns that share buckets would otherwise conflict and run again; queued, they never do.
A queue exists only while a turn holds or waits for it, so idle conversations cost nothing.
A turn started from inside a turn of the same key (a handler that processes another
activity of its own conversation) does not wait for itself: it runs unqueued.

With `carry`, a turn leaving hands the next turn of its key what it knows of its documents
as last committed (`Carried`: the stored bytes and version of each key it read or wrote),
so the next turn's first read of keys all covered by it needs no storage read. That turn's
write stays conditional on those versions: a write by another process in between is a
conflict, and the turn runs again on a fresh read. A failed turn hands on nothing, and only
a turn that waited carries (so an uncontended turn pays nothing for it; in a burst, the
first turn's successor reads the store, and each later turn starts from what it was handed).

A turn that has to wait reads, while it waits, those of its keys that no turn ahead of it in
the queue reads (`claim`: another user's buckets, say); when its turn comes, its first read is
that prefetch with what was handed on over it (newer), and only the keys neither covers are
read then. Its write stays conditional on every version it read, so a prefetched document
that changed meanwhile (a write by another process or queue) is a conflict, as any read is.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any

import orjson

from .backends import StoreItem

Known = dict[str, tuple[bytes, str] | None]
"""Documents as last committed, by key: (stored JSON bytes, version), or None: absent."""
Read = Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]]
"""A storage's `read`."""
Prefetch = tuple[tuple[str, ...], "asyncio.Future[dict[str, StoreItem]]"]
"""Keys a waiting turn read while it waited, and that read."""

_HELD: ContextVar[tuple[tuple[int, Hashable], ...]] = ContextVar(
    "agent_state_held_queues", default=()
)
"""The queues the current turn (and the tasks it starts) holds: (id of TurnQueues, key)."""
_CARRIED: ContextVar[Carried | None] = ContextVar("agent_state_carried", default=None)
"""What the turns of the outermost carrying queue the current turn holds know (`Carried`)."""
_UNKNOWN = object()


class Carried:
    """What one holder of a carrying queue knows of its documents, for the next holder.

    `received` is what the previous holder handed on, used once: by the hold's first read
    (`reader`), and only when it covers every key of that read. What is known is what the
    hold's latest turn read (its load: one read's result) or committed: after a commit, only
    the keys the commit wrote or checked, each at the version the commit saw, so what is
    handed on is the state of one instant, as a read could have returned it. While a turn
    waits, a commit on a store with atomic batches also checks the other keys known
    (`checks`), so the whole read is handed on; a commit while none waits hands on nothing.
    Only documents whose bytes are known, without a TTL, count. A turn nobody waits for
    only keeps a reference to its read (`_read`): the entries are made when a turn waits.
    """

    __slots__ = ("received", "_prefetch", "_known", "_read", "_waiting", "_storage_read", "_first")

    def __init__(
        self, received: Known | None, waiting: Callable[[], bool], prefetch: Prefetch | None = None
    ) -> None:
        self.received = received
        self._prefetch = prefetch
        """What the turn read while it waited (see the module doc), used once, by `reader`."""
        self._known: Known | None = {}
        """What is known (with `_read` on top); None once handed on: later notes are dropped."""
        self._read: tuple[Iterable[str], Mapping[str, StoreItem]] | None = None
        self._waiting = waiting
        self._storage_read: Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]] | None
        self._storage_read, self._first = None, False

    def reader(
        self, read: Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]]
    ) -> Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]]:
        """`read` (a storage's) for a turn starting now: its first call (the turn's load) is
        served from `received` when that covers the keys, and what it returns becomes what
        is known (the turn's later reads are not noted: known is one read's result)."""
        self._storage_read, self._first = read, True
        return self._carried_read

    async def _carried_read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        read = self._storage_read
        assert read is not None
        if not self._first:
            return await read(keys)
        self._first = False
        if not isinstance(keys, (tuple, list)):
            keys = list(keys)
        received, self.received = self.received, None
        prefetch, self._prefetch = self._prefetch, None
        found = _served(received, keys) if received is not None else None
        if found is not None:
            _drop(prefetch)
        elif prefetch is not None:
            found = await _completed(keys, received, prefetch, read)
        else:
            found = await read(keys)
        if self._known is not None:  # the items' bytes and versions never change: entries later
            self._known, self._read = {}, (keys, found)
        return found

    def _entries(self) -> Known | None:
        """What is known, the latest read's entries made now if they are not yet."""
        known, noted = self._known, self._read
        if known is None or noted is None:
            return known
        self._read = None
        keys, found = noted
        for key in keys:
            item = found.get(key)
            if item is None:
                known[key] = None
            elif item.data is not None and item.ttl is None and item.etag is not None:
                known[key] = (item.data, item.etag)
        return known

    def checks(
        self, changes: Mapping[str, StoreItem], unchanged: Mapping[str, str | None] | None
    ) -> dict[str, str | None]:
        """Read checks a commit adds so that everything known is handed on at the commit's
        instant: the known keys it neither writes nor checks, at their known versions (None:
        still absent); none unless a turn waits for the queue."""
        if not self._waiting():
            return {}
        known = self._entries()
        if not known:
            return {}
        return {
            key: entry[1] if entry is not None else None
            for key, entry in known.items()
            if key not in changes and (unchanged is None or key not in unchanged)
        }

    def wrote(
        self,
        changes: Mapping[str, StoreItem],
        etags: Mapping[str, str],
        unchanged: Mapping[str, str | None] | None,
    ) -> None:
        """Note a committed write: what is known from now on is each written key at its new
        version and each checked key known at the version checked; nothing else (nothing at
        all while no turn waits)."""
        if self._known is None:
            return
        if not self._waiting():
            self._known, self._read = {}, None
            return
        known = self._entries()
        assert known is not None
        after: Known = {}
        for key, etag in (unchanged or {}).items():
            entry = known.get(key, _UNKNOWN)
            if entry is None and etag is None:
                after[key] = None
            elif isinstance(entry, tuple) and entry[1] == etag:
                after[key] = entry
        for key, item in changes.items():
            if item.data is not None and item.ttl is None:
                after[key] = (item.data, etags[key])
        self._known = after

    def forget(self) -> None:
        """Drop what this hold knows: a failed turn (or one in doubt) hands nothing on."""
        if self._known is not None:
            self._known, self._read = {}, None

    def hand_on(self) -> Known | None:
        """What this hold hands the next one (None: nothing); later notes are dropped."""
        _drop(self._prefetch)  # a turn that never read
        self._prefetch = None
        known = self._entries()
        self._known = self._read = None
        return known or None


def carried() -> Carried | None:
    """The `Carried` of the carrying queue the current turn holds, if any."""
    return _CARRIED.get()


async def _completed(
    keys: list[str] | tuple[str, ...], received: Known | None, prefetch: Prefetch, read: Read
) -> dict[str, StoreItem]:
    """A waiting turn's first read of `keys`: what was handed on (`received`, the newer) over
    what it prefetched, and the keys neither covers read now (all of them if the prefetch
    failed: the read says why, if the store is the cause)."""
    fetched_keys, fetching = prefetch
    try:
        fetched = await fetching
    except Exception:
        return await read(keys)
    known, prefetched = received or {}, set(fetched_keys)
    found: dict[str, StoreItem] = {}
    rest: list[str] = []
    for key in keys:
        if key in known:
            entry = known[key]
            if entry is not None:
                found[key] = _item(entry)
        elif key in prefetched:
            item = fetched.get(key)
            if item is not None:
                found[key] = item
        else:
            rest.append(key)
    if rest:
        found.update(await read(rest))
    return found


def _drop(prefetch: Prefetch | None) -> None:
    """Cancel a prefetch nobody will use."""
    if prefetch is not None:
        prefetch[1].cancel()


def _consumed(fetching: asyncio.Future[dict[str, StoreItem]]) -> None:
    """Mark a prefetch's error as seen: an unused prefetch that failed is not an error."""
    if not fetching.cancelled():
        fetching.exception()


def _served(received: Known, keys: Iterable[str]) -> dict[str, StoreItem] | None:
    """Fresh items of `keys` from what was handed on, or None unless it covers every key."""
    keys = list(keys)
    if not all(key in received for key in keys):
        return None
    found = {}
    for key in keys:
        entry = received[key]
        if entry is not None:
            found[key] = _item(entry)
    return found


def _item(entry: tuple[bytes, str]) -> StoreItem:
    """A fresh item of a document handed on: parsed from its stored bytes, at its version."""
    return StoreItem(orjson.loads(entry[0]), entry[1], entry[0])


class TurnQueues:
    """FIFO queues by key: a turn waits only when another holds its key. With `carry`, each
    turn leaving hands the next one what it knows of its documents (see the module doc);
    with `claim_of` too, a turn that waits can `prefetch`: `claim_of(claimant)` names the
    documents the turn of that `claimant` (as given to `turn`) reads first."""

    __slots__ = ("_queues", "_carry", "_claims")

    def __init__(
        self, *, carry: bool = False, claim_of: Callable[[Any], Iterable[str]] | None = None
    ) -> None:
        self._queues: dict[Hashable, deque[asyncio.Future[Known | None]] | None] = {}
        """Each held key's waiters (None until a turn waits: an uncontended turn makes no
        queue)."""
        self._carry = carry
        self._claims = Claims(claim_of) if carry and claim_of is not None else None

    def turn(self, key: Hashable, claimant: object = None) -> _Place:
        """`async with queues.turn(key):` holds `key`'s queue for the block; turns of other
        keys run concurrently. `claimant`: what `claim_of` names the turn's documents by."""
        claims = self._claims if claimant is not None else None
        return _Place(self._queues, key, self._carry, claims, claimant)

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)


class Claims:
    """The documents each queue's turns read first: only the holder's claimant while none
    waits (named lazily, so an uncontended turn names nothing), then counted over the holder
    and the waiters."""

    __slots__ = ("_claim_of", "held")

    def __init__(self, claim_of: Callable[[Any], Iterable[str]]) -> None:
        self._claim_of = claim_of
        self.held: dict[Hashable, object] = {}
        """Per queue, its holder's claimant (a turn holding a free queue notes it here), or
        once a turn waits, the Counter of the claims; dropped with the queue."""

    def join(self, key: Hashable, claimant: object) -> list[str]:
        """Count a waiter's claim behind the turns in `key`'s queue; the keys of it that none
        of those turns reads."""
        counted = self.held.get(key)
        if not isinstance(counted, Counter):
            held = () if counted is None else self._claim_of(counted)
            counted = self.held[key] = Counter(held)
        claim = list(self._claim_of(claimant))
        private = [name for name in claim if not counted[name]]
        counted.update(claim)
        return private

    def leave(self, key: Hashable, claimant: object) -> None:
        """Stop counting a turn that left the queue (or gave up waiting)."""
        counted = self.held.get(key)
        if isinstance(counted, Counter):
            counted.subtract(self._claim_of(claimant))


class _Place:
    """One turn's place in a queue: `async with`, or `take` / `wait` / `leave` on a hot path
    that should not spend two coroutines on a key nobody else holds.

    The queue of a key is the deque of the turns waiting behind the one that holds it (None
    while none waits); a turn leaving hands the key to the first waiter, with what its turns
    know of their documents when the queues carry (the outermost carrying place of a turn
    only: a place taken inside it carries nothing), or removes the queue if none waits."""

    __slots__ = (
        "_queues", "_key", "_token", "_carry", "_carried", "_carried_token", "_claims",
        "_claimant", "_private", "_prefetch",
    )  # fmt: skip

    def __init__(
        self,
        queues: dict[Hashable, deque[asyncio.Future[Known | None]] | None],
        key: Hashable,
        carry: bool,
        claims: Claims | None,
        claimant: object,
    ) -> None:
        self._queues, self._key, self._carry = queues, key, carry
        self._claims, self._claimant = claims, claimant
        """The queues' claims, and this turn's claimant while it is noted or counted there."""
        self._private: list[str] | tuple[()] = ()
        """The keys of the turn's claim no turn ahead of it reads (a waiting turn's)."""
        self._token: Token[tuple[tuple[int, Hashable], ...]] | None = None
        self._carried: Carried | None = None
        self._carried_token: Token[Carried | None] | None = None
        self._prefetch: Prefetch | None = None

    async def __aenter__(self) -> None:
        place = self.take()
        if place is not None:
            await self.wait(place)

    async def __aexit__(self, *exc_info: object) -> None:
        self.leave()

    def take(self) -> asyncio.Future[Known | None] | None:
        """Hold the key if it is free (or already held by this turn) and return None; else
        join its queue and return the place to `wait` on (and maybe to `prefetch` for)."""
        held = _HELD.get()
        mark = (id(self._queues), self._key)
        if mark in held:  # a turn inside a turn of the same key: it must not wait for itself
            self._claimant = None
            return None
        queues, key = self._queues, self._key
        if key in queues:
            waiting = queues[key]
            if waiting is None:
                waiting = queues[key] = deque()
            place = asyncio.get_running_loop().create_future()
            waiting.append(place)
            if self._claims is not None and self._claimant is not None:
                self._private = self._claims.join(key, self._claimant)
            return place
        queues[key] = None
        if self._claims is not None and self._claimant is not None:
            self._claims.held[key] = self._claimant
        self._token = _HELD.set((*held, mark))
        return None  # a turn that did not wait carries nothing: uncontended turns pay nothing

    def prefetch(self, read: Read) -> None:
        """For a turn that `take` queued: start reading with `read` the keys of its claim that
        no turn ahead of it reads (its first read will use them, see the module doc)."""
        private = self._private
        if private:  # only a carrying queue counts claims
            fetching = asyncio.ensure_future(read(private))
            fetching.add_done_callback(_consumed)
            self._prefetch = (tuple(private), fetching)

    async def wait(self, place: asyncio.Future[Known | None]) -> None:
        """Wait until the key is handed to this turn (`take` returned `place`), then hold it."""
        waiting = self._queues[self._key]
        assert waiting is not None  # `take` queued `place` in it
        try:
            received = await place
        except BaseException:
            _drop(self._prefetch)
            self._unclaim()
            if place.done() and not place.cancelled():  # handed the key as it was cancelled
                self._hand_on(place.result())
            elif place in waiting:
                waiting.remove(place)
            raise
        self._token = _HELD.set((*_HELD.get(), (id(self._queues), self._key)))
        if self._carry:
            self._start_carrying(received)
        _drop(self._prefetch)  # unless carrying took it
        self._prefetch = None

    def _start_carrying(self, received: Known | None) -> None:
        """Carry for this turn unless a place it holds already does."""
        if _CARRIED.get() is None:
            self._carried = Carried(received, self._waited, self._prefetch)
            self._carried_token = _CARRIED.set(self._carried)
            self._prefetch = None

    def _unclaim(self) -> None:
        """Stop counting this turn's claim in its queue."""
        if self._claims is not None and self._claimant is not None:
            if self._queues.get(self._key) is not None:  # counted once a turn waited
                self._claims.leave(self._key, self._claimant)
            self._claimant = None

    def _waited(self) -> bool:
        """Whether a turn waits behind the one holding the key."""
        return bool(self._queues.get(self._key))

    def leave(self) -> None:
        """Give up the key (a no-op for a turn that did not take it itself)."""
        if self._token is not None:
            _HELD.reset(self._token)
            self._token = None
            self._unclaim()
            known = None
            if self._carried is not None:
                assert self._carried_token is not None
                _CARRIED.reset(self._carried_token)
                known = self._carried.hand_on()
                self._carried = self._carried_token = None
            self._hand_on(known)

    def _hand_on(self, known: Known | None) -> None:
        """Give the key (and `known`) to the first turn still waiting, or drop the empty
        queue."""
        waiting = self._queues[self._key]
        while waiting:  # None or empty: nobody waits
            place = waiting.popleft()
            if not place.done():
                place.set_result(known)
                return
        del self._queues[self._key]
        if self._claims is not None:
            self._claims.held.pop(self._key, None)
