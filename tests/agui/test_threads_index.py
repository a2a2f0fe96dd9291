"""The user's thread index (state/agui/_thread_index.py) under random changes: after each
batch of moves, removals and additions (spilling the head, splitting, merging and dropping
pages) the index holds exactly the entries a plain dict says, every page within its bounds
and range, and paging it from the newest visits each entry once in order, each page read
with at most the head and `LIST_PAGES` pages."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agent_state import ParsedKey, parse_key, thread_index_key, user_key, write_group
from agent_state.agui._thread_index import (
    LIST_PAGES,
    PAGE,
    Edit,
    IndexKeys,
    edit_writes,
    normal_head,
    order,
    read_stretch,
)
from agent_state.backends import ConflictError, InvalidKeyError, MemoryStorage, Storage

KEYS = IndexKeys.of("agui", "ada", "planner", None)


async def stored(storage: Storage) -> tuple[dict[str, Any], dict[int, dict[str, float]]]:
    """The head and every listed page's entries, read straight from the store."""
    head_item = (await storage.read([KEYS.head])).get(KEYS.head)
    head = normal_head(head_item.value if head_item is not None else None)
    keys = {KEYS.page(row[0]): row[0] for row in head["pages"]}
    found = await storage.read(list(keys))
    return head, {n: found[k].value["entries"] for k, n in keys.items()}


def check_shape(
    head: dict[str, Any], pages: dict[int, dict[str, float]]
) -> list[tuple[float, str]]:
    """Assert the tree's invariants; its entries, newest first."""
    entries = sorted(((float(u), t) for t, u in head["top"].items()), key=order)
    bounds = [(-float(row[1]), row[2]) for row in head["pages"]]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds)
    for at, row in enumerate(head["pages"]):
        page = pages[row[0]]
        assert row[3] == len(page) and 0 < len(page) <= PAGE, (row, len(page))
        places = [order((float(u), t)) for t, u in page.items()]
        assert all(p >= bounds[at] for p in places)
        if at + 1 < len(bounds):
            assert all(p < bounds[at + 1] for p in places)
        entries += sorted(((float(u), t) for t, u in page.items()), key=order)
    if bounds:
        assert all(order((float(u), t)) < bounds[0] for t, u in head["top"].items())
    assert not set(head["free"]) & {row[0] for row in head["pages"]}
    return entries


async def apply(storage: Storage, edit: Edit) -> None:
    head = (await storage.read([KEYS.head])).get(KEYS.head)
    await storage.write(await edit_writes(storage, KEYS, head, edit))


@pytest.mark.parametrize("seed", range(6))
async def test_random_changes_keep_the_index_exact_ordered_and_bounded(seed: int) -> None:
    chance = random.Random(seed)
    storage = MemoryStorage()
    model: dict[str, float] = {}
    clock, made, freed = 1_000.0, 0, 0
    for _ in range(120):
        edit = Edit()
        for _ in range(chance.randint(1, 12)):
            clock += chance.choice((0.0, 1.0, 0.5))  # ties too
            kind = chance.random()
            if kind < 0.45 or not model:  # a new thread
                made += 1
                thread = f"t{made:05d}"
                if thread in {t for _, t in edit.inserts}:
                    continue
                edit.inserts.append((clock, thread))
            else:
                thread = chance.choice(sorted(model))
                if thread in {t for _, t in edit.removes + edit.inserts}:
                    continue
                edit.removes.append((model[thread], thread))
                if kind < 0.85:  # updated: to the front; else deleted
                    edit.inserts.append((clock, thread))
        for _, thread in edit.removes:
            del model[thread]
        for updated, thread in edit.inserts:
            model[thread] = updated
        await apply(storage, edit)
        head, pages = await stored(storage)
        entries = check_shape(head, pages)
        freed = max(freed, len(head["free"]))
        assert entries == sorted(((u, t) for t, u in model.items()), key=order)
    assert len(model) > 2 * PAGE and freed  # pages were made, split and merged on the way
    seen: list[tuple[float, str]] = []
    after = None
    reads: list[int] = []
    counted = Counting(storage)
    while True:
        counted.calls = counted.keys = 0
        stretch = await read_stretch(counted, KEYS, 17, after)
        reads.append(counted.keys)
        assert counted.calls <= 2
        seen += stretch.entries
        if not stretch.more:
            break
        assert stretch.entries, (after, reads, len(seen))
        after = stretch.entries[-1]
    assert seen == sorted(((u, t) for t, u in model.items()), key=order)
    assert max(reads) <= 1 + LIST_PAGES


async def test_removing_stale_entries_from_what_a_listing_read_writes_at_its_versions() -> None:
    storage = MemoryStorage()
    for i in range(250):
        await apply(storage, Edit(inserts=[(float(i), f"t{i:03d}")]))
    stretch = await read_stretch(storage, KEYS, 20, None)
    stale = stretch.entries[3:6]
    await storage.write(stretch.cleanup(KEYS, stale))
    head, pages = await stored(storage)
    left = check_shape(head, pages)
    assert len(left) == 247 and not set(stale) & set(left)
    older = await read_stretch(storage, KEYS, 20, (100.0, "t100"))
    await apply(storage, Edit(removes=[older.entries[0]]))  # the index changed meanwhile
    with pytest.raises(ConflictError):
        await storage.write(older.cleanup(KEYS, older.entries[1:2]))


class Counting(MemoryStorage):
    """Counts the read calls and keys of the storage it wraps (reads go to it)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__()
        self.inner, self.calls, self.keys = inner, 0, 0

    async def read(self, keys: Any) -> Any:
        keys = list(keys)
        self.calls, self.keys = self.calls + 1, self.keys + len(keys)
        return await self.inner.read(keys)


def test_index_keys_are_the_users_own_and_parse_back() -> None:
    root = user_key("agui", "a/b", namespace="ns")
    head, page = thread_index_key(root, "my app"), thread_index_key(root, "my app", 12)
    assert head == "ns/agui/users/a%2Fb/agui-threads/my%20app"
    assert page == "ns/agui/users/a%2Fb/agui-thread-pages/my%20app/12"
    assert parse_key(head, namespace="ns") == ParsedKey(
        "user", "agui", user="a/b", namespace="ns", kind="agui_threads", record="my app"
    )
    assert parse_key(page, namespace="ns") == ParsedKey(
        "user", "agui", user="a/b", app="my app", namespace="ns", kind="agui_thread_page",
        record="12",
    )  # fmt: skip
    assert parse_key(thread_index_key(root, None, 0), namespace="ns").kind == "agui_thread_page"
    assert write_group(page) == root == write_group(head)  # the user's, not a thread's
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidKeyError):
            thread_index_key(root, None, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        parse_key(f"{root}/agui-thread-pages/01", namespace="ns")
