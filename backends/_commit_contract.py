"""The part of the storage contract about batches being all-or-nothing (see `_commit`).

Mixed into `testing.StorageContract`, so it runs against every backend: a write failing
part-way, a writer that died between the steps of a commit, readers waiting for a commit
under way, and the reserved names. It plants commits through the store's own primitives.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from . import _commit
from ._base import Storage
from ._errors import ConflictError, InvalidValueError, StorageUnavailableError
from ._items import Outcomes, PreparedWrite, StoreItem

KEYS = ["k/one", "k/two"]


async def _create_both(storage: Storage) -> dict[str, str]:
    return await storage.write({key: StoreItem({"v": 0}, None) for key in KEYS})


def first_unit(storage: Storage, writes: list[PreparedWrite]) -> list[PreparedWrite]:
    """The writes a store applies together with the first one: what a primitive write can
    have applied when it fails part-way (nothing, where its batches are atomic)."""
    if storage.atomic_batches:
        return []
    if storage.atomic_groups:
        return [write for write in writes if write.group == writes[0].group]
    return writes[:1]


def _fail_write_call(storage: Storage, number: int) -> None:
    """Make the `number`th primitive write fail part-way, once it applied its first atomic
    unit (`first_unit`), as a store failing in the middle of a batch would."""
    original = storage._write
    calls = 0

    async def failing(writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        nonlocal calls
        calls += 1
        if calls != number:
            return await original(writes, outcomes)
        if len(writes) > 1 and first_unit(storage, writes):
            await original(first_unit(storage, writes), outcomes)
        raise StorageUnavailableError(f"injected failure of write call {number}")

    storage._write = failing  # type: ignore[method-assign]


async def _plant(
    storage: Storage, *, recorded: bool, fate: str | None, deadline: float
) -> tuple[str, dict[str, str]]:
    """Place the intents of a commit setting both keys to 1 from 0, as a writer that died
    would leave them: recorded with `fate` (or no record), or unrecorded."""
    current = await storage.read(KEYS)
    commit_id = uuid.uuid4().hex
    intents = [
        _commit._intent(
            storage,
            PreparedWrite(
                key, b'{"v":1}', {"v": 1}, current[key].etag, storage.group_of(key), None
            ),
            current[key],
            commit_id,
            recorded,
            deadline,
        )
        for key in KEYS
    ]
    placed: Outcomes = {}
    await storage._write(intents, placed)
    if fate is not None:
        await _commit._create_records(storage, [commit_id], fate, None)
    return commit_id, {key: str(placed[key]) for key in KEYS}


class CommitContract:
    """Every `write` batch is all-or-nothing, on every backend."""

    @pytest.mark.parametrize("failing_call", [1, 2, 3])
    async def test_a_write_failing_part_way_leaves_all_or_nothing(
        self, storage: Storage, failing_call: int
    ) -> None:
        storage.intent_timeout = 0.2
        etags = await _create_both(storage)
        _fail_write_call(storage, failing_call)
        batch = {key: StoreItem({"v": 1}, etags[key]) for key in KEYS}
        try:
            await storage.write(batch)
            landed = True
        except StorageUnavailableError:
            landed = False
        del storage._write  # the class's primitive again
        stored = await storage.read(KEYS)
        values = {stored[key].value["v"] for key in KEYS}
        assert values in ({0}, {1})  # never one without the other
        if landed:
            assert values == {1}
        again = {key: StoreItem({"v": 2}, stored[key].etag) for key in KEYS}
        await storage.write(again)  # nothing is left locked
        assert {item.value["v"] for item in (await storage.read(KEYS)).values()} == {2}

    @pytest.mark.parametrize(
        ("recorded", "fate", "expected"),
        [
            (True, _commit.COMMITTED, 1),
            (True, _commit.ABORTED, 0),
            (True, None, 0),
            (False, None, 0),
        ],  # fmt: skip
    )
    async def test_readers_settle_a_commit_whose_writer_died(
        self, storage: Storage, recorded: bool, fate: str | None, expected: int
    ) -> None:
        await _create_both(storage)
        await _plant(storage, recorded=recorded, fate=fate, deadline=time.time() - 1)
        stored = await storage.read(KEYS)
        assert [stored[key].value for key in KEYS] == [{"v": expected}] * 2
        batch = {key: StoreItem({"v": 5}, stored[key].etag) for key in KEYS}
        await storage.write(batch)  # the settled versions are the ones to write on
        assert [(await storage.read([key]))[key].value for key in KEYS] == [{"v": 5}] * 2

    async def test_a_reader_waits_for_a_commit_under_way(self, storage: Storage) -> None:
        await _create_both(storage)
        commit_id, placed = await _plant(
            storage, recorded=True, fate=None, deadline=time.time() + 30
        )
        reader = asyncio.ensure_future(storage.read(KEYS))
        await asyncio.sleep(0)  # let it meet the intents
        await _commit._create_records(storage, [commit_id], _commit.COMMITTED, None)
        stored = await reader
        assert [stored[key].value for key in KEYS] == [{"v": 1}] * 2
        assert {key: stored[key].etag for key in KEYS} == placed

    async def test_a_writer_meeting_a_live_commit_waits_then_conflicts(
        self, storage: Storage
    ) -> None:
        etags = await _create_both(storage)
        commit_id, _ = await _plant(storage, recorded=True, fate=None, deadline=time.time() + 30)
        writer = asyncio.ensure_future(
            storage.write({key: StoreItem({"v": 9}, etags[key]) for key in KEYS})
        )
        await asyncio.sleep(0)
        await _commit._create_records(storage, [commit_id], _commit.COMMITTED, None)
        with pytest.raises(ConflictError):  # it wrote on the versions the commit replaced
            await writer
        assert {item.value["v"] for item in (await storage.read(KEYS)).values()} == {1}

    async def test_a_key_held_back_with_a_replaced_sibling_is_still_committed(
        self, storage: Storage
    ) -> None:
        """A store applying a write group at once refuses all of it when one key conflicts:
        after the commit, a later writer replacing one intent must not leave its sibling's
        intent to be aborted."""
        storage.intent_timeout = 0.0  # any intent left behind is at once the reader's to abort
        pair = ["k/conversations/c", "k/conversations/c/users/u"]  # one unit where groups are
        keys = [*pair, "k/users/u"]
        await storage.write({key: StoreItem({"v": 0}, None) for key in keys})
        current = await storage.read(keys)
        original = storage._write
        calls = 0

        async def overtaken(writes: list[PreparedWrite], outcomes: Outcomes) -> None:
            nonlocal calls
            calls += 1
            if calls == 3:  # replacing the intents, once committed: a later writer wins one
                later = PreparedWrite(pair[0], b'{"v":7}', {"v": 7}, "*", writes[0].group, None)
                await original([later], {})
            await original(writes, outcomes)

        storage._write = overtaken  # type: ignore[method-assign]
        try:
            await storage.write({key: StoreItem({"v": 1}, current[key].etag) for key in keys})
        finally:
            del storage._write
        stored = await storage.read(keys)
        assert [stored[key].value["v"] for key in keys] == [7 if calls >= 3 else 1, 1, 1]

    async def test_the_reserved_names_stay_the_stores_own(self, storage: Storage) -> None:
        bad: dict[str, Any] = {_commit.INTENT: {}, "v": 1}
        with pytest.raises(InvalidValueError):
            await storage.write({"k/bad": StoreItem(bad)})
        assert await storage.read(["k/bad"]) == {}
        storage.intent_timeout = 0.2
        etags = await _create_both(storage)
        await storage.write({key: StoreItem({"v": 1}, etags[key]) for key in KEYS})
        await _commit._create_records(storage, ["0" * 32], _commit.ABORTED, None)
        assert sorted([key async for key in storage.list()]) == KEYS  # no commit records
