"""`History.batch`, `History.recent` and `History.head_key`: appending to a stored history
outside a turn (as the ADK bridge does) in one conditional write, on every backend; the same
stored layout a turn's `state.history` reads and writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_state import History, HistoryError, TurnIds, open_storage, open_turn, session_key
from agent_state.backends import ConflictError, FormatError, Storage, StoreItem
from tests.stores import STORES

IDS = TurnIds(channel_id="h", user_id="ada", conversation_id="c1", app_name="hist")
SESSION = session_key("h", "c1", "ada", agent="hist")
HEAD = History.head_key(SESSION)


def message(ident: str) -> dict[str, Any]:
    return {"id": ident, "role": "user", "content": f"text of {ident}"}


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


async def started(storage: Storage) -> StoreItem:
    """A history a turn started (with one message), and its head as read."""
    async with open_turn(storage, IDS) as state:
        await state.history.append(message("m0"))
    return (await storage.read([HEAD]))[HEAD]


@pytest.mark.parametrize("form", ["compact", "indented", "absent", "reordered"])
def test_a_new_heads_bytes_are_the_json_of_its_value(form: str) -> None:
    """The new head's bytes are built on the bytes the head was read in, where those are the
    layout's own (its tail is not encoded again), and are its value's JSON either way, also
    when a page fills."""
    value: dict[str, Any] = {"format": 1, "page_size": 32, "count": 0, "tail": []}
    if form == "reordered":
        value = {"tail": [], "count": 0, "page_size": 32, "format": 1}
    option = orjson.OPT_INDENT_2 if form == "indented" else None
    head = StoreItem(value, "v1", None if form == "absent" else orjson.dumps(value, option=option))
    for n in range(70):  # fills two pages
        batch = [message(f"m{n}"), {"id": f"ü{n}", "role": "assistant", "content": '\u2603 "'}]
        new = History.batch(SESSION, head, batch)[HEAD]
        assert new.data == orjson.dumps(new.value)
        head = StoreItem(new.value, "v1", None if form == "absent" else new.data)
    assert head.value["count"] == 140 and len(head.value["tail"]) == 140 % 32


async def test_batches_land_where_a_turns_history_reads_them_across_pages(
    storage: Storage,
) -> None:
    head = await started(storage)
    ids = ["m0"]
    for start in range(1, 75, 7):  # batches of 7 fill pages 0 and 1 on the way
        batch = [message(f"m{i}") for i in range(start, start + 7)]
        items = History.batch(SESSION, head, batch)
        etags = await storage.write(items)
        head = StoreItem(items[HEAD].value, etags[HEAD], items[HEAD].data)
        ids += [m["id"] for m in batch]
    async with open_turn(storage, IDS) as state:
        assert await state.history.count() == len(ids) == 78
        assert [m["id"] for m in await state.history.first(100)] == ids
        assert await state.history.holds(ids) == set(ids)
        assert [m["id"] for m in await state.history.after("m40", 3)] == ["m41", "m42", "m43"]
        await state.history.append(message("m78"))  # a turn goes on from the batches
    stored = (await storage.read([HEAD]))[HEAD]
    assert History.recent(SESSION, stored, 2) == [message("m77"), message("m78")]
    assert History.recent(SESSION, stored, 40) is None  # some are on pages
    assert History.recent(SESSION, None) == []


async def test_a_batch_on_an_old_head_or_with_a_held_id_writes_nothing(storage: Storage) -> None:
    head = await started(storage)
    await storage.write(History.batch(SESSION, head, [message("m1")]))
    with pytest.raises(ConflictError) as stale:  # another append came first
        await storage.write(History.batch(SESSION, head, [message("m2")]))
    assert HEAD in stale.value.keys
    head = (await storage.read([HEAD]))[HEAD]
    with pytest.raises(ConflictError) as held:
        await storage.write(History.batch(SESSION, head, [message("m3"), message("m1")]))
    assert History.batch(SESSION, head, [message("m1")]).keys() - {HEAD} <= set(held.value.keys)
    async with open_turn(storage, IDS) as state:
        assert [m["id"] for m in await state.history.first(10)] == ["m0", "m1"]
        assert await state.history.holds(["m2", "m3"]) == set()


async def test_refusals_come_before_anything_is_built(storage: Storage) -> None:
    head = await started(storage)
    before = head.value
    copy = {**before, "tail": list(before["tail"])}
    with pytest.raises(HistoryError, match="repeat an id"):
        History.batch(SESSION, head, [message("a"), message("a")])
    with pytest.raises(HistoryError, match="role"):
        History.batch(SESSION, head, [{"id": "x", "role": "robot"}])
    with pytest.raises(HistoryError, match="not JSON"):
        History.batch(SESSION, head, [{**message("x"), "n": float("nan")}])
    for version in (None, "*"):  # the head is written conditionally, never over another's
        with pytest.raises(HistoryError, match="version"):
            History.batch(SESSION, StoreItem(head.value, version), [message("x")])
    with pytest.raises(FormatError, match="page size"):
        History.batch(SESSION, StoreItem({**head.value, "page_size": 8}, "1"), [message("x")])
    with pytest.raises(FormatError, match="format"):
        History.recent(SESSION, StoreItem({**head.value, "format": 2}, "1"))
    items = History.batch(SESSION, head, [message("x")])
    assert head.value == before == copy, "the head as read is left as it is"
    assert items[HEAD].value["tail"] == [message("m0"), message("x")]


def test_encoded_messages_are_taken_as_they_are_but_for_their_ids_and_roles() -> None:
    """With their bytes given (`encoded=`), messages build the same writes as checked ones,
    without a copy; ids, roles and the number of encodings are still checked."""
    value: dict[str, Any] = {"format": 1, "page_size": 32, "count": 0, "tail": []}
    head = StoreItem(value, "v1", orjson.dumps(value))
    batch = [message("a"), message("b")]
    encoded = [orjson.dumps(m) for m in batch]
    given = History.batch(SESSION, head, batch, encoded=encoded)
    assert given == History.batch(SESSION, head, batch)
    assert {k: i.data for k, i in given.items()} == {
        k: i.data for k, i in History.batch(SESSION, head, batch).items()
    }
    assert given[HEAD].value["tail"][1] is batch[1]
    with pytest.raises(HistoryError, match="repeat an id"):
        History.batch(SESSION, head, [message("a"), message("a")], encoded=encoded)
    with pytest.raises(HistoryError, match="role"):
        History.batch(SESSION, head, [{"id": "x", "role": "robot"}], encoded=encoded[:1])
    with pytest.raises(HistoryError, match="encodings"):
        History.batch(SESSION, head, batch, encoded=encoded[:1])
