"""The part of the storage contract about batches being all-or-nothing (see `_commit`).

Mixed into `testing.StorageContract`, so it runs against every backend: a write failing
part-way, a writer that died between the steps of a commit (whatever the TTLs and clocks
involved), readers waiting for a commit under way, a refused commit's versions, and the
reserved names. It plants commits through the store's own primitives, and gives readers
clocks of their own (`ReaderClock`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson
import pytest

from . import _commit
from ._base import Storage
from ._errors import ConflictError, InvalidValueError, StorageUnavailableError
from ._items import ANY, Outcomes, PreparedWrite, StoreItem

KEYS = ["k/one", "k/two"]


class ReaderClock:
    """A reader's clocks, `offset` seconds off this machine's Unix time, moving only while
    the reader waits (`sleep` passes its seconds at once): waits cost no real time."""

    def __init__(self, *, offset: float = 0.0) -> None:
        self.now, self.steady = time.time() + offset, 0.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.steady

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.steady += seconds
        await asyncio.sleep(0)


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
    storage: Storage,
    *,
    recorded: bool,
    fate: str | None,
    deadline: float,
    ttl: float | None = None,
) -> tuple[str, dict[str, str]]:
    """Place the intents of a commit setting both keys to 1 from 0 (for `ttl` seconds), as
    a writer that died would leave them: recorded with `fate` (or no record), or unrecorded."""
    current = await storage.read(KEYS)
    commit_id = uuid.uuid4().hex
    intents = [
        _commit._intent(
            storage,
            PreparedWrite(key, b'{"v":1}', {"v": 1}, current[key].etag, storage.group_of(key), ttl),
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

    async def test_a_dead_commit_whose_documents_expired_leaves_their_keys_writable(
        self, storage: Storage
    ) -> None:
        """A writer with a TTL died after committing, before replacing its intents: once the
        TTL passed, the keys read as absent and can be created again."""
        await _create_both(storage)
        await _plant(
            storage, recorded=True, fate=_commit.COMMITTED, deadline=time.time() - 1, ttl=60
        )
        storage.clock = ReaderClock(offset=120)  # the reader, once the TTL passed
        assert await storage.read(KEYS) == {}
        await storage.write({KEYS[0]: StoreItem({"v": 2}, None)})
        await storage.write({key: StoreItem({"v": 3}, ANY) for key in KEYS})
        stored = await storage.read(KEYS)
        assert [stored[key].value for key in KEYS] == [{"v": 3}] * 2

    async def test_a_writer_stalled_until_an_aborts_record_expired_never_commits(
        self, storage: Storage
    ) -> None:
        """A writer paused for a day after placing its intents: meanwhile a reader aborted the
        commit and put one document back, and the abort's record expired. The writer must not
        commit the other document."""
        storage.intent_timeout = 0.0  # late at once: the reader aborts it
        etags = await _create_both(storage)
        original = storage._write
        calls = 0

        async def stalled(writes: list[PreparedWrite], outcomes: Outcomes) -> None:
            nonlocal calls
            calls += 1
            await original(writes, outcomes)
            if calls == 1 and _commit.INTENT.encode() in writes[0].data:  # the intents
                commit_id = _commit.parse(KEYS[0], orjson.loads(writes[0].data)).commit
                assert (await storage.read(KEYS[:1]))[KEYS[0]].value == {"v": 0}  # aborted
                await storage._delete([f"{_commit.RECORDS}/{commit_id}"], {}, {})  # expired
                storage.clock = ReaderClock(offset=_commit.ABORTED_RECORD_TTL)  # a day on

        storage._write = stalled  # type: ignore[method-assign]
        try:
            await storage.write({key: StoreItem({"v": 1}, etags[key]) for key in KEYS})
        except ConflictError:
            pass
        finally:
            del storage._write
        stored = await storage.read(KEYS)
        assert {stored[key].value["v"] for key in KEYS} in ({0}, {1})  # never one of them

    @pytest.mark.parametrize("recorded", [True, False])
    async def test_a_reader_waits_for_a_dead_writer_at_most_intent_timeout_on_its_clock(
        self, storage: Storage, recorded: bool
    ) -> None:
        """A writer whose clock runs 20 s ahead sets deadlines 20 s late; a reader still waits
        at most `intent_timeout` on its own clock (and one wait more), then aborts the commit."""
        storage.intent_timeout = 0.5
        await _create_both(storage)
        writer_ahead = 20.0
        deadline = time.time() + writer_ahead + storage.intent_timeout
        await _plant(storage, recorded=recorded, fate=None, deadline=deadline)
        reader = storage.clock = ReaderClock()
        stored = await storage.read(KEYS)
        assert [stored[key].value for key in KEYS] == [{"v": 0}] * 2
        stall = reader.monotonic()
        assert stall <= storage.intent_timeout + _commit.LONGEST_WAIT, f"waited {stall} s"

    async def test_a_refused_commit_names_every_key_whose_version_it_changed(
        self, storage: Storage
    ) -> None:
        """Another writer wins one key while the batch places its intents: the batch is
        refused, and every key it put back under a new version is named, so a retry that
        re-reads the keys named (and only those) lands."""
        etags = await _create_both(storage)
        original = storage._write
        calls = 0

        async def overtaken(writes: list[PreparedWrite], outcomes: Outcomes) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                rival = PreparedWrite(
                    KEYS[1], b'{"v":7}', {"v": 7}, ANY, storage.group_of(KEYS[1]), None
                )
                await original([rival], {})
            await original(writes, outcomes)

        storage._write = overtaken  # type: ignore[method-assign]
        try:
            with pytest.raises(ConflictError) as refused:
                await storage.write({key: StoreItem({"v": 1}, etags[key]) for key in KEYS})
        finally:
            del storage._write
        stored = await storage.read(KEYS)
        assert [stored[key].value for key in KEYS] == [{"v": 0}, {"v": 7}]
        moved = [key for key in KEYS if stored[key].etag != etags[key]]
        assert set(moved) <= set(refused.value.keys)
        retry = {key: stored[key].etag if key in refused.value.keys else etags[key]
                 for key in KEYS}  # fmt: skip
        await storage.write({key: StoreItem({"v": 2}, retry[key]) for key in KEYS})
        stored = await storage.read(KEYS)
        assert [stored[key].value for key in KEYS] == [{"v": 2}] * 2

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
