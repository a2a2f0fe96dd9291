"""Buckets over shared documents: a turn copies only what it touches and never edits the store.

`TurnState` loads with `read_shared`, so a bucket starts from the storage's own decoded
document. These tests prove that no way of reading or editing through a bucket changes that
document before the save, and that the save stores exactly the turn's edits.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agent_state._background import open_state
from agent_state._ids import TurnIds
from agent_state._keys import conversation_key
from agent_state._scopes import ConversationState, UserState
from agent_state._turn_state import TurnState
from agent_state.backends import MemoryStorage, StoreItem
from agent_state.backends._base import EncodedItem, SharedItem

IDS = TurnIds(channel_id="msteams", user_id="29:ada", conversation_id="19:c", app_name="bot")
KEY = conversation_key("msteams", "19:c")
START = {
    "count": 0,
    "profile": {"name": "Ada", "langs": ["en"]},
    "history": [{"n": 0}],
    "tags": ["a"],
    "nested": {"deep": {"list": [1]}},
    "keep": {"untouched": [1, 2]},
}


async def shared_value(storage: MemoryStorage, key: str = KEY) -> dict[str, Any]:
    return (await storage.read_shared([key]))[key].value


async def stored(storage: MemoryStorage, key: str = KEY) -> dict[str, Any]:
    return (await MemoryStorage.read(storage, [key]))[key].value


async def test_no_edit_through_a_bucket_reaches_the_store_before_the_save(storage):
    await storage.write({KEY: StoreItem(START)})
    shared = await shared_value(storage)
    snapshot = orjson.dumps(shared)

    state = TurnState(IDS)
    await state.load(storage)
    conversation = state.conversation
    state.get("conversation.history").append({"n": 1})
    conversation["profile"]["langs"].append("fr")
    conversation.setdefault("nested", {})["deep"]["list"].append(2)
    conversation.pop("tags").append("popped")
    conversation.update(count=1)
    state.set("conversation.profile.name", "Grace")
    state.set("conversation.nested.deep.flag", True)
    for name, value in conversation.items():
        if name == "keep":
            value["untouched"].append(3)
    conversation.data["history"][0]["n"] = 99
    conversation.data["extra"] = {"x": [1]}

    assert orjson.dumps(shared) == snapshot
    assert orjson.dumps(await shared_value(storage)) == snapshot
    assert await stored(storage) == START

    await state.save(storage)
    expected = {
        "count": 1,
        "profile": {"name": "Grace", "langs": ["en", "fr"]},
        "history": [{"n": 99}, {"n": 1}],
        "nested": {"deep": {"list": [1, 2], "flag": True}},
        "keep": {"untouched": [1, 2, 3]},
        "extra": {"x": [1]},
    }
    assert await stored(storage) == expected
    assert await shared_value(storage) == expected
    assert orjson.dumps(shared) == snapshot  # the old version's document is never edited


async def test_values_handed_out_stay_the_turns_after_the_save(storage):
    await storage.write({KEY: StoreItem(START)})
    state = TurnState(IDS)
    await state.load(storage)
    history = state.conversation["history"]
    history.append({"n": 1})
    await state.save(storage)
    history.append({"n": "after the save"})
    assert (await shared_value(storage))["history"] == [{"n": 0}, {"n": 1}]
    assert (await stored(storage))["history"] == [{"n": 0}, {"n": 1}]


async def test_untouched_members_are_shared_not_copied(storage):
    await storage.write({KEY: StoreItem(START)})
    before = await shared_value(storage)
    state = TurnState(IDS)
    await state.load(storage)
    state["conversation:count"] = state.get("conversation.count") + 1
    await state.save(storage)
    after = await shared_value(storage)
    assert after["count"] == 1 and after["keep"] is before["keep"]
    assert after["history"] is before["history"] and after is not before


async def test_reading_containers_without_editing_them_writes_nothing(storage):
    await storage.write({KEY: StoreItem(START)})
    storage.writes.clear()
    state = TurnState(IDS)
    await state.load(storage)
    assert state.get("conversation.history") == [{"n": 0}]
    assert dict(state.conversation.items())["keep"] == {"untouched": [1, 2]}
    assert state.has("conversation.nested.deep.list.0")
    await state.save(storage)
    assert storage.writes == []


async def test_the_save_hands_the_buckets_bytes_to_the_storage(storage):
    state = TurnState(IDS)
    await state.load(storage)
    state["conversation:n"] = 1
    item = state.conversation.pending_write()
    assert isinstance(item, EncodedItem) and item.data == orjson.dumps({"n": 1})


class Notes(BaseModel):
    items: list[dict[str, Any]] = []
    anything: Any = None


class NotesState(UserState):
    model = Notes


async def test_typed_buckets_validate_a_private_copy(storage):
    key = UserState.key_for(IDS)
    document = {"items": [{"a": [1]}], "anything": {"free": ["form"]}}
    await storage.write({key: StoreItem(document)})
    shared = await shared_value(storage, key)
    state = TurnState(IDS, [NotesState])
    await state.load(storage)
    state.user.data.items[0]["a"].append(2)
    state.user.data.anything["free"].append("edit")
    assert shared == document and await shared_value(storage, key) == document
    await state.save(storage)
    assert await stored(storage, key) == {
        "items": [{"a": [1, 2]}],
        "anything": {"free": ["form", "edit"]},
    }


async def test_rebase_never_edits_the_newer_shared_document(storage):
    await storage.write({KEY: StoreItem({"a": {"x": 1}, "b": {"y": [1]}})})
    async with open_state(storage, ConversationState, IDS) as bucket:
        bucket["a"]["x"] = 2
        current = (await storage.read([KEY]))[KEY]
        await storage.write({KEY: StoreItem({**current.value, "c": 3}, current.etag)})
        newer = await shared_value(storage)
        snapshot = orjson.dumps(newer)
    bucket["b"]["y"].append("after the rebase")
    bucket["c"] = 4
    assert orjson.dumps(newer) == snapshot
    assert await stored(storage) == {"a": {"x": 2}, "b": {"y": [1]}, "c": 3}


def test_the_stored_bytes_are_the_baseline():
    same = ConversationState(KEY, SharedItem({"a": 1}, "1", b'{"a":1}'))
    same["a"] = 1
    assert same.pending_write() is None


def test_a_differently_encoded_baseline_costs_a_write_but_never_misses_a_change():
    spaced = ConversationState(KEY, SharedItem({"a": 1}, "1", b'{ "a": 1 }'))
    spaced["a"] = 1
    redundant = spaced.pending_write()
    assert redundant is not None and redundant.value == {"a": 1}
    changed = ConversationState(KEY, SharedItem({"a": 1}, "1", b'{ "a": 1 }'))
    changed["a"] = 2
    assert changed.pending_write().value == {"a": 2}  # type: ignore[union-attr]


def test_loading_never_edits_the_item_either():
    document = {"list": [1], "obj": {"k": "v"}}
    bucket = ConversationState(KEY, StoreItem(document, "1"))
    bucket["list"].append(2)
    bucket.data["obj"]["k"] = "changed"
    bucket.clear()
    assert document == {"list": [1], "obj": {"k": "v"}}


# --- random edit sequences: through a bucket, or on a plain deep copy, store the same -------

_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=2)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)
    ),
    max_leaves=8,
)
_names = st.sampled_from(["a", "b", "c", "d"])
_edits = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "set",
                "delete",
                "append",
                "set_inner",
                "setdefault",
                "pop",
                "update",
                "path_set",
                "path_get_append",
                "data_set",
                "values_append",
            ]
        ),
        _names,
        st.sampled_from("xyz"),
        _json,
    ),
    max_size=8,
)


def _edit(
    state: TurnState, plain: dict[str, Any], action: str, name: str, inner: str, value: Any
) -> None:
    """Apply one edit through the turn's conversation bucket and, alike, to `plain`."""
    bucket = state.conversation
    fresh = copy.deepcopy
    current = plain.get(name)
    if action == "set":
        bucket[name] = fresh(value)
        plain[name] = fresh(value)
    elif action == "delete":
        bucket.delete(name)
        plain.pop(name, None)
    elif action == "append" and isinstance(current, list):
        bucket[name].append(fresh(value))
        current.append(fresh(value))
    elif action == "set_inner" and isinstance(current, dict):
        bucket[name][inner] = fresh(value)
        current[inner] = fresh(value)
    elif action == "setdefault":
        bucket.setdefault(name, fresh(value))
        plain.setdefault(name, fresh(value))
    elif action == "pop":
        bucket.pop(name, None)
        plain.pop(name, None)
    elif action == "update":
        bucket.update({name: fresh(value)})
        plain.update({name: fresh(value)})
    elif action == "path_set" and (name not in plain or isinstance(current, dict)):
        state.set(f"conversation.{name}.{inner}", fresh(value))
        plain.setdefault(name, {})[inner] = fresh(value)
    elif action == "path_get_append" and isinstance(current, list):
        state.get(f"conversation.{name}").append(fresh(value))
        current.append(fresh(value))
    elif action == "data_set":
        bucket.data[name] = fresh(value)
        plain[name] = fresh(value)
    elif action == "values_append":
        for member in bucket.values():
            if isinstance(member, list):
                member.append(fresh(value))
        for member in plain.values():
            if isinstance(member, list):
                member.append(fresh(value))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_names, _json, max_size=4), _edits)
def test_random_edits_store_what_a_plain_copy_would(start, edits):
    async def run() -> None:
        storage = MemoryStorage()
        await storage.write({KEY: StoreItem(start)})
        shared = await shared_value(storage)
        snapshot = orjson.dumps(shared)
        state = TurnState(IDS)
        await state.load(storage)
        plain = copy.deepcopy(start)
        for edit in edits:
            _edit(state, plain, *edit)
        assert orjson.dumps(shared) == snapshot
        assert await stored(storage) == start
        await state.save(storage)
        assert await stored(storage) == plain
        assert await shared_value(storage) == plain
        assert orjson.dumps(shared) == snapshot

    asyncio.run(run())
