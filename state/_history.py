"""A session's message history: an append-only log in pages, saved with the turn.

Stored under the session's key `S`, so it shares the conversation's write group (one Redis
slot, one Cosmos DB partition) and commits with the turn's buckets:

- `S/history`, the head: `{"format": 1, "page_size": P, "count": n, "tail": [...]}`, the
  last `n % P` messages; when the tail fills, its messages become a page;
- `S/history/pages/<k>`: `{"format": 1, "messages": [...]}`, messages `k*P .. k*P+P-1`,
  written once and never again;
- `S/history/ids/<id>`: `{"format": 1, "seq": i}`, where message `id` sits.

A turn reads the head when it first touches the history, with the index entries of the
ids it appends (to refuse duplicates), in one read; its save writes the head, a page when
the tail fills and an entry per message. Nothing of it grows with the history. Reads load
the pages they need in one read. A stored document of another format is refused with
`FormatError`, never rewritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from ._document import Record, Records, _misfit
from ._errors import StateError
from ._keys import history_index_key, history_key, history_page_key
from .backends import ANY, FormatError, InvalidValueError, StoreItem
from .backends._json import JsonRuleError, copy_json_encoded

FORMAT: Final = 1
PAGE_SIZE: Final = 32
"""Messages per page (and at most in the head's tail)."""
ROLES: Final = frozenset(
    {"user", "assistant", "system", "developer", "tool", "reasoning", "activity"}
)


class HistoryError(StateError, ValueError):
    """A message that cannot join the history (no id, an unknown role, not JSON, an id the
    history already holds) or a read from an id it does not hold."""


class _Head(Record):
    kind = "history"
    format = FORMAT
    fields = {"page_size": int, "count": int, "tail": list}


class _Page(Record):
    kind = "history_page"
    format = FORMAT
    fields = {"messages": list}


class _Entry(Record):
    kind = "history_index"
    format = FORMAT
    fields = {"seq": int}


def check_message(message: object) -> dict[str, Any]:
    """A copy of `message` if it is a valid history message; else `HistoryError`."""
    return _checked_message(message)[0]


def _checked_message(message: object) -> tuple[dict[str, Any], bytes]:
    """`check_message(message)` and the JSON bytes of the copy."""
    if not isinstance(message, Mapping):
        raise HistoryError(f"a message must be a JSON object, not {type(message).__name__}")
    ident = _check_id_and_role(message)
    try:
        copy, data = copy_json_encoded(message if type(message) is dict else dict(message))
    except (JsonRuleError, InvalidValueError) as exc:
        raise HistoryError(f"message {ident!r} is not JSON: {exc}") from None
    return copy, data


class History:
    """The history of the turn's session (`state.history`): `await` its reads and appends;
    what a turn appends is saved with the turn, all-or-nothing with its buckets."""

    __slots__ = ("_state", "_session", "_key", "_head")

    def __init__(self, state: Records, session_key: str) -> None:
        self._state, self._session, self._key = state, session_key, history_key(session_key)
        self._head: _Head | None = None

    async def count(self) -> int:
        """How many messages the history holds (this turn's appends included)."""
        return int((await self._loaded_head()).value.get("count", 0))

    async def append(self, *messages: Mapping[str, Any]) -> None:
        """Append messages (each a JSON object with a unique `id` and a known `role`),
        checked before anything changes; saved when the turn is."""
        checked, ids, _ = _checked(messages)
        wanted: dict[str, type[Record]] = {self._entry_key(i): _Entry for i in ids}
        if self._head is None:
            wanted[self._key] = _Head  # one read for the head and the new ids' entries
        entries = (await self._state.fetch(wanted))[: len(ids)]
        head = (await self._loaded_head()).value
        taken = [i for i, entry in zip(ids, entries, strict=True) if entry.stored() is not None]
        if taken:
            raise HistoryError(f"the history already holds message id(s) {taken}")
        extended, seqs, pages = _extended(head, checked)
        for entry, seq in zip(entries, seqs, strict=True):
            entry.value.update(_entry(seq))
        for number, messages_of_page in pages.items():
            page = self._state.attach(_Page, self._page_key(number))
            page.value.update(_page(messages_of_page))
        head.update(extended)

    @staticmethod
    def head_key(session_key: str) -> str:
        """The key of the history head of the session whose bucket key is `session_key`."""
        return history_key(session_key)

    @staticmethod
    def recent(
        session_key: str, head: StoreItem | None, n: int | None = None
    ) -> list[dict[str, Any]] | None:
        """The last `n` messages (None: all), oldest first, of the history of the session whose
        bucket key is `session_key`, from its head as read (None: no history), when they are
        all in the head's tail; None when some are on pages (a turn's `history` reads them).
        The messages are `head.value`'s own, not copies. `FormatError` for a head of another
        format."""
        if head is None:
            return []
        count, tail = _stored_head(history_key(session_key), head)
        wanted = count if n is None else min(count, _limit(n))
        if wanted > len(tail):
            return None
        return tail[len(tail) - wanted :] if wanted else []

    @staticmethod
    def batch(
        session_key: str,
        head: StoreItem,
        messages: Sequence[Mapping[str, Any]],
        *,
        encoded: Sequence[bytes] | None = None,
    ) -> dict[str, StoreItem]:
        """The writes that append `messages` to the stored history of the session whose
        bucket key is `session_key`, for a writer outside a turn (a bridge), given its head as
        read (`head.etag` its version): the new head conditional on that version, an index
        entry per message and the page the tail fills create-only, each with its JSON bytes.

        Written in one `storage.write` (with the writer's other documents), the append lands
        whole or not at all: a `ConflictError` on the head means another append came first, on
        an index entry that the history already holds that id. Messages are checked as
        `append` checks them (`HistoryError`), a head of another format raises `FormatError`,
        both before anything is built. `head.value` is left as it is (the new head's tail
        holds its messages); `head.data`, when given, must be the bytes it was read from (the
        new head's bytes are built on them). A history that is not stored yet is started by a turn
        (`state.history.append`), whose save also indexes the session for `forget_user`.

        `encoded`, when given, holds each message's `orjson.dumps` bytes, from a caller that
        built the messages of decoded JSON itself (as `StoreItem.data` on a write): the
        messages are then taken as they are, not copied or checked against the JSON rule
        again (their ids and roles still are), and the new head holds them.
        """
        if type(head) is not StoreItem or type(head.etag) is not str or head.etag in ("", ANY):
            raise HistoryError("batch needs the stored history head as read, with its version")
        key = history_key(session_key)
        _stored_head(key, head)
        if encoded is None:
            checked, ids, encoded = _checked(messages)
        else:
            checked, ids = _encoded(messages, encoded)
        extended, seqs, pages = _extended(head.value, checked)
        items = {key: StoreItem(extended, head.etag, _head_bytes(head, extended, encoded))}
        for message_id, seq in zip(ids, seqs, strict=True):
            entry = _entry(seq)
            items[history_index_key(session_key, message_id)] = StoreItem(
                entry, None, orjson.dumps(entry)
            )
        for number, messages_of_page in pages.items():
            page = _page(messages_of_page)
            items[history_page_key(session_key, number)] = StoreItem(page, None, orjson.dumps(page))
        return items

    async def last(self, n: int) -> list[dict[str, Any]]:
        """The last `n` messages, oldest first."""
        count = await self.count()
        return await self._slice(max(0, count - _limit(n)), count)

    async def first(self, n: int) -> list[dict[str, Any]]:
        """The first `n` messages (all of them if fewer), oldest first."""
        return await self._slice(0, min(_limit(n), await self.count()))

    async def after(self, message_id: str | None, limit: int = 50) -> list[dict[str, Any]]:
        """Up to `limit` messages after `message_id` (None: from the first), oldest first."""
        start = 0 if message_id is None else await self._seq(message_id) + 1
        return await self._slice(start, min(start + _limit(limit), await self.count()))

    async def before(
        self, message_id: str | None, limit: int = 50, *, along: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        """Up to `limit` messages before `message_id` (None: up to the last), oldest first.
        The keys `along` are read with the pages (records the caller fetches next), so a
        page costs one read however long the history is."""
        end = await self.count() if message_id is None else await self._seq(message_id)
        return await self._slice(max(0, end - _limit(limit)), end, along)

    async def upto(self, message_id: str) -> list[dict[str, Any]]:
        """Every message up to and including `message_id`, oldest first."""
        return await self._slice(0, await self._seq(message_id) + 1)

    async def holds(self, ids: Iterable[str]) -> set[str]:
        """Those of `ids` the history holds (one read of their index entries)."""
        wanted = list(dict.fromkeys(ids))
        entries = await self._state.fetch({self._entry_key(i): _Entry for i in wanted})
        return {i for i, entry in zip(wanted, entries, strict=True) if entry.stored() is not None}

    async def _slice(self, start: int, end: int, along: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Messages `start .. end - 1`, read from the pages they are on and the tail (and the
        keys `along` in the same read)."""
        if start >= end:
            await self._state.fetch({}, along)
            return []
        head = (await self._loaded_head()).value
        count = int(head.get("count", 0))
        tail_start = count - len(head.get("tail", []))
        page_end = min(end, tail_start)
        numbers = range(start // PAGE_SIZE, (page_end - 1) // PAGE_SIZE + 1)
        keys = [self._page_key(k) for k in numbers] if start < page_end else []
        pages = await self._state.fetch(dict.fromkeys(keys, _Page), along)
        messages: list[Any] = []
        for key, page in zip(keys, pages, strict=True):
            stored = page.stored()
            if stored is None or len(stored["messages"]) != PAGE_SIZE:
                raise FormatError(key, "is a missing or short history page")
            messages += stored["messages"]
        first = (start // PAGE_SIZE) * PAGE_SIZE if keys else tail_start
        if end > tail_start:
            messages += head.get("tail", [])
        picked = messages[start - first : end - first]
        return list(orjson.loads(orjson.dumps(picked)))  # the caller's own copies

    async def _seq(self, message_id: str) -> int:
        (entry,) = await self._state.fetch({self._entry_key(message_id): _Entry})
        stored = entry.stored()
        if stored is None:
            raise HistoryError(f"the history holds no message {message_id!r}")
        return int(stored["seq"])

    async def _loaded_head(self) -> _Head:
        if self._head is None:
            (head,) = await self._state.fetch({self._key: _Head})
            stored = head.stored()
            if stored is not None and stored.get("page_size") != PAGE_SIZE:
                raise FormatError(self._key, f"has page size {stored.get('page_size')!r}")
            self._head = head
        return self._head

    def _page_key(self, number: int) -> str:
        return history_page_key(self._session, number)

    def _entry_key(self, message_id: str) -> str:
        return history_index_key(self._session, message_id)


def _check_id_and_role(message: Mapping[str, Any]) -> str:
    """The id of `message`; `HistoryError` unless it is a non-empty str and its role known."""
    ident, role = message.get("id"), message.get("role")
    if not isinstance(ident, str) or not ident:
        raise HistoryError(f"a message needs a non-empty string id, got {ident!r:.80}")
    if role not in ROLES:
        raise HistoryError(
            f"message {ident!r} has role {role!r:.40}; expected one of {sorted(ROLES)}"
        )
    return ident


def _checked(
    messages: Iterable[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[str], list[bytes]]:
    """Copies of `messages` checked by `check_message`, their ids, which must not repeat, and
    their JSON bytes."""
    pairs = [_checked_message(message) for message in messages]
    checked = [copy for copy, _ in pairs]
    ids = [message["id"] for message in checked]
    if len(set(ids)) != len(ids):
        raise HistoryError(f"messages to append repeat an id: {ids}")
    return checked, ids, [data for _, data in pairs]


def _encoded(
    messages: Sequence[Mapping[str, Any]], encoded: Sequence[bytes]
) -> tuple[list[dict[str, Any]], list[str]]:
    """`messages` given with their JSON bytes, as a list of dicts, and their ids, which must
    not repeat: checked as `check_message` checks them, but for the JSON rule."""
    if len(encoded) != len(messages):
        raise HistoryError(f"{len(messages)} messages given with {len(encoded)} encodings")
    checked: list[dict[str, Any]] = []
    for message in messages:
        if type(message) is not dict:
            raise HistoryError(f"an encoded message must be a dict, not {type(message).__name__}")
        _check_id_and_role(message)
        checked.append(message)
    ids = [message["id"] for message in checked]
    if len(set(ids)) != len(ids):
        raise HistoryError(f"messages to append repeat an id: {ids}")
    return checked, ids


def _extended(
    head: Mapping[str, Any], messages: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[int], dict[int, list[Any]]]:
    """The one layout of an append: the head after `messages` join the history whose head is
    `head` (left as it is), each message's position, and the pages they fill (number ->
    messages)."""
    count, tail = int(head.get("count", 0)), list(head.get("tail", []))
    seqs, pages = [], {}
    for message in messages:
        seqs.append(count)
        tail.append(message)
        count += 1
        if len(tail) == PAGE_SIZE:
            pages[count // PAGE_SIZE - 1], tail = tail, []
    extended = dict(head)
    extended.update(format=FORMAT, page_size=PAGE_SIZE, count=count, tail=tail)
    return extended, seqs, pages


_HEAD_FIELDS: Final = ["format", "page_size", "count", "tail"]
_HEAD_START: Final = b'{"format":%d,"page_size":%d,"count":' % (FORMAT, PAGE_SIZE)


def _head_bytes(head: StoreItem, extended: dict[str, Any], added: Sequence[bytes]) -> bytes:
    """The JSON of `extended`, the head `head` with the messages encoded as `added` after its
    tail: those bytes joined to `head.data` where it is the layout's own encoding (`orjson`'s,
    the head's fields only, in order) and no page was filled, so the tail is not encoded again
    on every append; else `extended` encoded anew."""
    data, value = head.data, head.value
    if (
        data is not None and list(value) == _HEAD_FIELDS
        and len(extended["tail"]) == len(value["tail"]) + len(added)
    ):  # fmt: skip
        start = b'%s%d,"tail":[' % (_HEAD_START, value["count"])
        if data.startswith(start) and data.endswith(b"]}"):
            tail = data[len(start) : -2]
            joined = b",".join(added)
            new_tail = tail + b"," + joined if tail else joined
            return b'%s%d,"tail":[%s]}' % (_HEAD_START, extended["count"], new_tail)
    return orjson.dumps(extended)


def _entry(seq: int) -> dict[str, Any]:
    """The index entry of the message at position `seq`."""
    return {"format": FORMAT, "seq": seq}


def _page(messages: list[Any]) -> dict[str, Any]:
    """A full page of `messages`."""
    return {"format": FORMAT, "messages": messages}


def _stored_head(key: str, head: StoreItem) -> tuple[int, list[Any]]:
    """The message count and tail of the history head at `key` as read; `FormatError` for
    another format."""
    value = head.value
    count, tail = value.get("count"), value.get("tail")
    if (
        value.get("format") == FORMAT and value.get("page_size") == PAGE_SIZE
        and type(count) is int and type(tail) is list
    ):  # fmt: skip
        return count, tail
    reason = _misfit(_Head, value) or f"has page size {value.get('page_size')!r}"
    raise FormatError(key, reason)


def _limit(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise HistoryError(f"a message count must be an int >= 0, got {n!r}")
    return n
