"""A user's AG-UI threads of one agent in order, newest first: an index of which a page is
listed in a bounded number of storage reads, however many threads the user has.

Entries `thread -> updated` are ordered by (updated, newest first; then thread id) in a tree
of two levels under the user (`thread_index_key`):

- the head `U/agui-threads/{app}` holds the newest entries itself (`top`, about `TOP`) and a
  directory of the older pages, newest first: `[number, bound updated, bound thread, count]`;
  a page holds the entries from its bound up to the next page's bound;
- a page `U/agui-thread-pages/{app}/{n}` holds at most `PAGE` entries.

A thread's entry moves in the same all-or-nothing write that changes its summary
(`S/agui-thread`, whose `updated` the entry repeats): the old entry is found through the
directory by its old time, the new one goes where its time falls (the head, as a rule).
When the head holds more than `TOP` entries its oldest go to a page of their own; a page over
`PAGE` splits; a page left under `MERGE` by a removal joins a neighbour it fits in, and an
empty one leaves the directory (its number is kept in `free` for the next new page). So a
change writes the head and at most three pages, and a listing reads the head, then at most
`LIST_PAGES` pages in one read. Concurrent writers of one user's index conflict on the head;
a writer that changed only the head's newest entries replays them onto the newer head
(`IndexHead.rebase`) when the directory is as it read it, so two threads' runs both land
without running again.
"""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from .. import Record, TurnState, thread_index_key, user_key
from ..backends import Storage, StoreItem

FORMAT: Final = 1
TOP: Final = 100
"""Entries the head holds itself (more only briefly, after concurrent writers replayed)."""
KEEP: Final = 50
"""Entries the head keeps when it passes `TOP`: the oldest of the rest go to a new page."""
PAGE: Final = 100
"""Entries an older page holds at most (a page over it splits in two)."""
MERGE: Final = 25
"""A page left with fewer entries by a removal joins a neighbour it fits in."""
LIST_PAGES: Final = 8
"""Pages a listing reads at most (in one read)."""

Entry = tuple[float, str]
"""(updated, thread id)."""
Order = tuple[float, str]
"""An entry's place: (-updated, thread id), ascending = newest first."""


def order(entry: Entry) -> Order:
    """Where `entry` sorts: newest first, then by thread id."""
    return (-float(entry[0]), entry[1])


@dataclass(frozen=True, slots=True)
class IndexKeys:
    """The keys of one user's thread index of one agent."""

    head: str
    user: str
    agent: str | None

    @classmethod
    def of(cls, channel: str, user: str, agent: str | None, namespace: str | None) -> IndexKeys:
        root = user_key(channel, user, namespace=namespace)
        return cls(thread_index_key(root, agent), root, agent)

    def page(self, number: int) -> str:
        return thread_index_key(self.user, self.agent, number)


def empty_head() -> dict[str, Any]:
    return {"format": FORMAT, "top": {}, "pages": [], "free": [], "next": 0}


def normal_head(value: dict[str, Any] | None) -> dict[str, Any]:
    """A head's value (in place), an empty head for none."""
    if not value:
        value = value if value is not None else {}
        value.update(empty_head())
    return value


def normal_page(value: dict[str, Any] | None) -> dict[str, Any]:
    """A page's value (in place), an empty page for none."""
    if not value:
        value = value if value is not None else {}
        value.update(format=FORMAT, entries={})
    return value


def home(head: dict[str, Any], place: Order) -> int:
    """The position in the directory of the page whose range holds `place`; -1: the head."""
    bounds = [(-float(d[1]), str(d[2])) for d in head["pages"]]
    return bisect_right(bounds, place) - 1


def _sorted(entries: dict[str, Any]) -> list[Entry]:
    return sorted(((float(u), t) for t, u in entries.items()), key=order)


@dataclass(slots=True)
class Edit:
    """Entries to remove and add, in one write of the index: `pages` names the pages it
    needs (read them), `apply` makes the change on the head and those pages."""

    removes: list[Entry] = field(default_factory=list)
    inserts: list[Entry] = field(default_factory=list)

    def pages(self, head: dict[str, Any]) -> list[int]:
        """The page numbers the edit reads and may write, from the head alone."""
        pages = head["pages"]
        counts = [int(d[3]) for d in pages]
        top = len(head["top"])
        wanted: dict[int, None] = {}
        shrunk: dict[int, None] = {}
        grown = 0
        for entry in self.removes:
            at = home(head, order(entry))
            if at < 0:
                if entry[1] in head["top"] and float(head["top"][entry[1]]) == entry[0]:
                    top -= 1
            else:
                wanted[pages[at][0]] = shrunk[at] = None
                counts[at] -= 1
        for entry in self.inserts:
            at = home(head, order(entry))
            if at < 0:
                top += 1
                grown += top > TOP
            else:
                wanted[pages[at][0]] = None
                counts[at] += 1
                grown += counts[at] > PAGE
        for at in shrunk:
            left = counts[at]
            if not 0 < left < MERGE:
                continue
            if at > 0 and counts[at - 1] + left <= PAGE:
                wanted[pages[at - 1][0]] = None
            elif at == 0 and top + left <= TOP:
                pass  # into the head
            elif at + 1 < len(pages) and counts[at + 1] + left <= PAGE:
                wanted[pages[at + 1][0]] = None
        if grown:  # the new page of a spill or split (one at most): a freed number first
            wanted[head["free"][0] if head["free"] else int(head["next"])] = None
        return list(wanted)

    def apply(self, head: dict[str, Any], pages: dict[int, dict[str, Any]]) -> set[int]:
        """Make the change on `head` and the `pages` read (number -> value); the numbers of
        the pages it changed. A page it would need and was not given is left alone (a
        spill or merge waits for the next writer)."""
        touched: set[int] = set()
        directory: list[list[Any]] = head["pages"]
        shrunk: set[int] = set()
        for entry in self.removes:
            updated, thread = entry
            at = home(head, order(entry))
            holder = head["top"] if at < 0 else _entries(pages, directory[at][0])
            if holder is not None and thread in holder and float(holder[thread]) == updated:
                del holder[thread]
                if at >= 0:
                    number = directory[at][0]
                    directory[at][3] = len(holder)
                    touched.add(number)
                    shrunk.add(number)
        for entry in self.inserts:
            updated, thread = entry
            at = home(head, order(entry))
            if at < 0:
                head["top"][thread] = updated
                continue
            number = directory[at][0]
            entries = _entries(pages, number)
            if entries is None:
                raise ValueError(f"index page {number} was not read")  # `pages` names it
            entries[thread] = updated
            directory[at][3] = len(entries)
            touched.add(number)
        if len(head["top"]) > TOP:
            self._spill(head, pages, touched)
        for at, row in reversed(list(enumerate(directory))):
            if int(row[3]) > PAGE:
                self._split(head, pages, at, touched)
        for number in shrunk:
            self._merge(head, pages, number, touched)
        return touched

    @staticmethod
    def _spill(head: dict[str, Any], pages: dict[int, dict[str, Any]], touched: set[int]) -> None:
        """Move the head's oldest entries (all but `KEEP`, `PAGE` at most) to a new page."""
        number = _next_number(head, pages)
        if number is None:
            return
        ordered = _sorted(head["top"])
        moved = ordered[max(KEEP, len(ordered) - PAGE) :]
        target = pages[number]["entries"]
        for updated, thread in moved:
            del head["top"][thread]
            target[thread] = updated
        _take_number(head, number)
        head["pages"].insert(0, [number, moved[0][0], moved[0][1], len(target)])
        touched.add(number)

    @staticmethod
    def _split(
        head: dict[str, Any], pages: dict[int, dict[str, Any]], at: int, touched: set[int]
    ) -> None:
        """Move the older half of the page at `at` to a new page right after it."""
        number = _next_number(head, pages)
        row = head["pages"][at]
        entries = _entries(pages, row[0])
        if number is None or entries is None:
            return
        ordered = _sorted(entries)
        moved = ordered[len(ordered) // 2 :]
        target = pages[number]["entries"]
        for updated, thread in moved:
            del entries[thread]
            target[thread] = updated
        _take_number(head, number)
        row[3] = len(entries)
        head["pages"].insert(at + 1, [number, moved[0][0], moved[0][1], len(target)])
        touched.update((row[0], number))

    @staticmethod
    def _merge(
        head: dict[str, Any], pages: dict[int, dict[str, Any]], number: int, touched: set[int]
    ) -> None:
        """A page a removal left small joins a neighbour it fits in (the newer first); an
        empty one leaves the directory, its range going to the newer neighbour."""
        directory: list[list[Any]] = head["pages"]
        at = next((i for i, row in enumerate(directory) if row[0] == number), None)
        entries = _entries(pages, number)
        if at is None or entries is None or len(entries) >= MERGE:
            return
        if entries:
            if (
                at > 0
                and (newer := _entries(pages, directory[at - 1][0])) is not None
                and (len(newer) + len(entries) <= PAGE)
            ):
                target, row = newer, directory[at - 1]
            elif at == 0 and len(head["top"]) + len(entries) <= TOP:
                target, row = head["top"], None
            elif at + 1 < len(directory) and (
                (older := _entries(pages, directory[at + 1][0])) is not None
                and len(older) + len(entries) <= PAGE
            ):
                target, row = older, directory[at + 1]
                row[1], row[2] = directory[at][1], directory[at][2]  # its range starts here now
            else:
                return
            target.update(entries)
            entries.clear()
            if row is not None:
                row[3] = len(target)
                touched.add(row[0])
        del directory[at]
        head["free"].append(number)
        touched.add(number)


def _entries(pages: dict[int, dict[str, Any]], number: int) -> dict[str, Any] | None:
    page = pages.get(number)
    return None if page is None else page["entries"]


def _next_number(head: dict[str, Any], pages: dict[int, dict[str, Any]]) -> int | None:
    """The number a new page takes (a freed one first), if that page was read."""
    number = head["free"][0] if head["free"] else int(head["next"])
    page = pages.get(number)
    return number if page is not None and not page["entries"] else None


def _take_number(head: dict[str, Any], number: int) -> None:
    if head["free"] and head["free"][0] == number:
        head["free"].pop(0)
    else:
        head["next"] = number + 1


class IndexHead(Record):
    """`U/agui-threads/{app}`: the newest entries and the directory of the older pages."""

    kind = "agui_threads"
    format = FORMAT
    fields = {"top": dict, "pages": list, "free": list, "next": int}
    __slots__ = ("_read",)

    def __init__(self, key: str | None, item: StoreItem | None) -> None:
        super().__init__(key, item)
        self._read: dict[str, Any] | None = None

    def begin(self) -> dict[str, Any]:
        """The live head to edit (an empty one when there is none), as read kept aside."""
        value = self.value
        if self.stored() is None:
            value.update(empty_head())
        if self._read is None:
            self._read = copy.deepcopy(value)
        return value

    def rebase(self, newer: StoreItem | None) -> None:
        """Replay this turn's changes of the head's newest entries onto a newer head whose
        directory is the one this turn read, when this turn changed nothing else; any other
        change is a conflict (the turn runs again)."""
        read = self._read
        theirs = normal_head(copy.deepcopy(newer.value) if newer is not None else None)
        mine = self.value
        same = ("pages", "free", "next")
        if read is None or any(read[k] != mine.get(k) or read[k] != theirs[k] for k in same):
            super().rebase(newer)
            return
        added = {t: u for t, u in mine["top"].items() if read["top"].get(t) != u}
        removed = {t: u for t, u in read["top"].items() if t not in mine["top"]}
        self.load(newer)
        value = normal_head(self.value)
        for thread, updated in removed.items():
            if value["top"].get(thread) == updated:
                del value["top"][thread]
        value["top"].update(added)
        self._read = theirs


class IndexPage(Record):
    """`U/agui-thread-pages/{app}/{n}`: older entries of a user's thread index."""

    kind = "agui_thread_page"
    format = FORMAT
    fields = {"entries": dict}
    __slots__ = ()

    def begin(self) -> dict[str, Any]:
        """The live page to edit (an empty one when there is none)."""
        value = self.value
        if self.stored() is None:
            value.update(format=FORMAT, entries={})
        return value


async def edit_in_turn(turn: TurnState, keys: IndexKeys, edit: Edit) -> None:
    """Make `edit` on the index in `turn`: saved in the turn's one all-or-nothing write."""
    (head_record,) = await turn.fetch({keys.head: IndexHead})
    assert isinstance(head_record, IndexHead)
    head = head_record.begin()
    numbers = edit.pages(head)
    pages: dict[int, dict[str, Any]] = {}
    if numbers:
        records = await turn.fetch({keys.page(n): IndexPage for n in numbers})
        for number, record in zip(numbers, records, strict=True):
            assert isinstance(record, IndexPage)
            pages[number] = record.begin()
    edit.apply(head, pages)


async def edit_writes(
    storage: Storage, keys: IndexKeys, head_item: StoreItem | None, edit: Edit
) -> dict[str, StoreItem]:
    """The writes that make `edit` on the index whose head was read as `head_item` (its
    pages read here), each conditional on the version read: for a write of a caller's own."""
    head = normal_head(copy.deepcopy(head_item.value) if head_item is not None else None)
    numbers = {keys.page(n): n for n in edit.pages(head)}
    found = await storage.read(list(numbers)) if numbers else {}
    pages = {n: normal_page(found[k].value if k in found else None) for k, n in numbers.items()}
    touched = edit.apply(head, pages)
    writes = {keys.head: StoreItem(head, head_item.etag if head_item is not None else None)}
    for number in touched:
        key = keys.page(number)
        writes[key] = StoreItem(pages[number], found[key].etag if key in found else None)
    return writes


@dataclass(slots=True)
class Listed:
    """A stretch of the index read for a listing: the entries after the cursor (at most
    `limit`, newest first), whether more follow, and what was read (to clean it up)."""

    entries: list[Entry]
    more: bool
    head: StoreItem | None
    pages: dict[int, StoreItem]

    def cleanup(self, keys: IndexKeys, stale: Iterable[Entry]) -> dict[str, StoreItem]:
        """The writes removing `stale` entries from what was read, conditional on the
        versions read (no read of its own)."""
        edit = Edit(removes=list(stale))
        head = normal_head(copy.deepcopy(self.head.value) if self.head is not None else None)
        pages = {n: normal_page(copy.deepcopy(item.value)) for n, item in self.pages.items()}
        touched = edit.apply(head, pages)
        writes = {keys.head: StoreItem(head, self.head.etag if self.head is not None else None)}
        for number in touched:
            if number in self.pages:
                writes[keys.page(number)] = StoreItem(pages[number], self.pages[number].etag)
        return writes


async def read_stretch(
    storage: Storage, keys: IndexKeys, limit: int, after: Entry | None
) -> Listed:
    """The index's entries after `after` (None: from the newest), at most `limit`, in two
    reads: the head, then at most `LIST_PAGES` pages."""
    found = await storage.read([keys.head])
    head_item = found.get(keys.head)
    head = normal_head(head_item.value if head_item is not None else None)
    directory = head["pages"]
    start = -1 if after is None else home(head, order(after))
    collected: list[Entry] = []
    if start < 0:
        collected += _sorted(head["top"])
        if after is not None:
            collected = [entry for entry in collected if order(entry) > order(after)]
    positions = [start] if start >= 0 else []  # after the cursor: some of it, unknown how much
    needed, at = limit + 1 - len(collected), start + 1
    while at < len(directory) and needed > 0 and len(positions) < LIST_PAGES:
        positions.append(at)
        needed -= int(directory[at][3])
        at += 1
    page_keys = {keys.page(directory[at][0]): int(directory[at][0]) for at in positions}
    items = await storage.read(list(page_keys)) if page_keys else {}
    read_pages = {n: items[k] for k, n in page_keys.items() if k in items}
    for item in read_pages.values():
        collected += _sorted(normal_page(item.value)["entries"])
    if after is not None:
        collected = [entry for entry in collected if order(entry) > order(after)]
    collected.sort(key=order)
    more = len(collected) > limit or at < len(directory)
    return Listed(collected[:limit], more, head_item, read_pages)
