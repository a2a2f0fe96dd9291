"""The storage contract as a test suite any backend can run: `class TestMine(StorageContract)`.

Subclass `StorageContract` in a pytest module and give it a `harness` fixture yielding a
`Harness` around a fresh, empty store; every test of the contract then runs against it.
Capability flags on the storage (`atomic_batches`, `atomic_groups`, `max_ttl_seconds`) and
on the harness (`stores_bytes`) say which outcomes to expect. Needs pytest and
pytest-asyncio (`asyncio_mode = "auto"`); imported only by tests.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from ._base import Storage
from ._commit_contract import CommitContract
from ._errors import (
    ConflictError,
    FormatError,
    InvalidKeyError,
    InvalidValueError,
    StateTooLargeError,
    StorageUnavailableError,
)
from ._items import StoreItem


@dataclass
class Harness:
    """A fresh, empty store plus raw access to it, for the suite.

    `put_raw`/`get_raw` store and fetch envelope bytes as the backend keeps them, so tests
    can plant unknown formats; `open_another` gives a second client of the same store (or
    the same object where there is only one). `stores_bytes` is False for stores that hold
    JSON documents only (Cosmos DB): planting bytes that are not JSON does not apply there.
    """

    storage: Storage
    put_raw: Callable[[str, bytes], Awaitable[None]]
    get_raw: Callable[[str], Awaitable[bytes | None]]
    open_another: Callable[[], Awaitable[Storage]]
    stores_bytes: bool = True


async def create(storage: Storage, key: str, value: dict[str, Any]) -> str:
    """Create `key` (create-only) and return its etag."""
    return (await storage.write({key: StoreItem(value, None)}))[key]


def _escape(ident: str) -> str:
    """An outside id as the state layer's key scheme escapes it into one segment."""
    segment = quote(ident, safe="-_.:@~", errors="surrogatepass")
    return segment.replace(".", "%2E") if set(segment) <= {"."} else segment


def _raw_segment(ident: str) -> str:
    """The id as a raw segment, where it is a valid one: keys need no escaping at all."""
    text = ident.replace("/", "|").replace("\x00", "")
    return text if text.strip(".") else f"dots{len(text)}"


HOSTILE_IDS = [
    "plain",
    "a/b",
    "x/conversations/y",
    "%2F",
    "%",
    "..",
    ".",
    "...",
    "-",
    "~",
    "🙂 emoji",
    "NUL\x00byte",
    "a" * 1000,
    "Ada",
    "ada",
    "ADA",
    "29:1abc",
    "19:x@thread.v2",
    "con",
    "aux.txt",
    " space ",
    "tab\t",
    "back\\slash",
    "q?h#",
    "\u200b",
]


class StorageContract(CommitContract):
    """The contract every backend keeps; see the module docstring for how to run it."""

    @pytest.fixture
    def storage(self, harness: Harness) -> Storage:
        return harness.storage

    async def test_create_read_update_delete(self, storage: Storage) -> None:
        etag1 = await create(storage, "c/users/ada", {"name": "Ada", "n": 0})
        assert isinstance(etag1, str) and etag1
        item = (await storage.read(["c/users/ada"]))["c/users/ada"]
        assert item.value == {"name": "Ada", "n": 0} and item.etag == etag1

        etag2 = (await storage.write({"c/users/ada": StoreItem({"n": 1}, etag1)}))["c/users/ada"]
        assert etag2 != etag1
        assert (await storage.read(["c/users/ada"]))["c/users/ada"] == StoreItem({"n": 1}, etag2)

        await storage.delete(["c/users/ada"])
        assert await storage.read(["c/users/ada"]) == {}
        await storage.delete(["c/users/ada", "c/users/never"])  # missing keys are no-ops

    async def test_batch_read_leaves_out_missing_keys(self, storage: Storage) -> None:
        await storage.write({"k/a": StoreItem({"a": 1}), "k/b": StoreItem({"b": 2})})
        found = await storage.read(["k/a", "k/missing", "k/b", "k/a"])
        assert {k: v.value for k, v in found.items()} == {"k/a": {"a": 1}, "k/b": {"b": 2}}
        assert await storage.read([]) == {}

    async def test_falsy_and_nested_values_round_trip(self, storage: Storage) -> None:
        value = {
            "zero": 0,
            "empty": "",
            "no": False,
            "list": [],
            "none": None,
            "obj": {},
            "deep": {"a": [1, 2.5, {"b": [True, None]}]},
            "unicode": "żółw 🐢",
        }
        await create(storage, "k/v", value)
        assert (await storage.read(["k/v"]))["k/v"].value == value

    async def test_deleting_recreated_key_never_reuses_a_version(self, storage: Storage) -> None:
        first = await create(storage, "k/r", {"i": 1})
        await storage.delete(["k/r"])
        second = await create(storage, "k/r", {"i": 2})
        assert second != first
        with pytest.raises(ConflictError):
            await storage.write({"k/r": StoreItem({"i": 3}, first)})

    async def test_stale_version_is_a_conflict_naming_the_key(self, storage: Storage) -> None:
        old = await create(storage, "k/p", {"v": 1})
        await storage.write({"k/p": StoreItem({"v": 2}, old)})
        with pytest.raises(ConflictError) as info:
            await storage.write({"k/p": StoreItem({"v": 3}, old)})
        assert info.value.keys == ["k/p"]
        assert (await storage.read(["k/p"]))["k/p"].value == {"v": 2}

    async def test_create_only_fails_on_existing_key(self, storage: Storage) -> None:
        await create(storage, "k/e", {"v": 1})
        with pytest.raises(ConflictError) as info:
            await create(storage, "k/e", {"v": 2})
        assert info.value.keys == ["k/e"]
        assert (await storage.read(["k/e"]))["k/e"].value == {"v": 1}

    async def test_version_precondition_on_missing_key_is_a_conflict(
        self, storage: Storage
    ) -> None:
        etag = await create(storage, "k/m", {"v": 1})
        await storage.delete(["k/m"])
        with pytest.raises(ConflictError):
            await storage.write({"k/m": StoreItem({"v": 2}, etag)})
        assert await storage.read(["k/m"]) == {}

    async def test_unconditional_write_creates_and_overwrites(self, storage: Storage) -> None:
        first = (await storage.write({"k/u": StoreItem({"v": 1}, "*")}))["k/u"]
        second = (await storage.write({"k/u": StoreItem({"v": 2}, "*")}))["k/u"]
        assert first != second
        assert (await storage.read(["k/u"]))["k/u"] == StoreItem({"v": 2}, second)

    async def test_a_conflict_names_every_failed_key_and_writes_nothing(
        self, storage: Storage
    ) -> None:
        a = await create(storage, "k/a", {"v": 1})
        await create(storage, "k/b", {"v": 1})
        await storage.write({"k/a": StoreItem({"v": 2}, a)})
        batch = {
            "k/a": StoreItem({"v": 3}, a),  # stale
            "k/b": StoreItem({"v": 3}, None),  # exists
            "k/c": StoreItem({"v": 3}, None),  # fresh
        }
        with pytest.raises(ConflictError) as info:
            await storage.write(batch)
        assert info.value.keys == ["k/a", "k/b"]
        stored = await storage.read(["k/a", "k/b", "k/c"])
        assert "k/c" not in stored
        assert stored["k/a"].value == {"v": 2} and stored["k/b"].value == {"v": 1}

    async def test_delete_precondition(self, storage: Storage) -> None:
        etag = await create(storage, "k/d", {"v": 1})
        await storage.write({"k/d": StoreItem({"v": 2}, etag)})
        with pytest.raises(ConflictError) as info:
            await storage.delete(["k/d"], if_match={"k/d": etag})
        assert info.value.keys == ["k/d"]
        current = (await storage.read(["k/d"]))["k/d"]
        assert current.etag is not None
        await storage.delete(["k/d"], if_match={"k/d": current.etag})
        assert await storage.read(["k/d"]) == {}

    async def test_concurrent_create_only_writers_exactly_one_wins(self, harness: Harness) -> None:
        clients = [harness.storage] + [await harness.open_another() for _ in range(3)]

        async def attempt(i: int) -> int | None:
            try:
                await clients[i % len(clients)].write({"race/one": StoreItem({"winner": i}, None)})
                return i
            except ConflictError:
                return None

        results = await asyncio.gather(*(attempt(i) for i in range(24)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        stored = await harness.storage.read(["race/one"])
        assert stored["race/one"].value == {"winner": winners[0]}

    async def test_read_modify_write_with_retry_loses_no_update(self, harness: Harness) -> None:
        clients = [harness.storage] + [await harness.open_another() for _ in range(3)]
        await create(harness.storage, "race/counter", {"n": 0})

        async def increment(i: int) -> None:
            store = clients[i % len(clients)]
            while True:
                item = (await store.read(["race/counter"]))["race/counter"]
                next_value = {"n": item.value["n"] + 1}
                try:
                    await store.write({"race/counter": StoreItem(next_value, item.etag)})
                    return
                except ConflictError:
                    await asyncio.sleep(0)  # yield so the winner's turn can finish

        tasks = 30
        await asyncio.gather(*(increment(i) for i in range(tasks)))
        assert (await harness.storage.read(["race/counter"]))["race/counter"].value == {"n": tasks}

    async def test_hostile_ids_round_trip_and_never_collide(self, storage: Storage) -> None:
        keys = {}
        for i, ident in enumerate(HOSTILE_IDS):
            keys[f"chan/users/{_escape(ident)}"] = i
            keys[f"{_escape(ident)}/conversations/{_escape(ident)}/users/u"] = 1000 + i
            keys[f"chan%2Fx/conversations/{_escape(ident)}"] = 2000 + i
            keys[f"raw/{_raw_segment(ident)}"] = 3000 + i
        assert len(keys) == 4 * len(HOSTILE_IDS)
        await storage.write({key: StoreItem({"i": i}, None) for key, i in keys.items()})
        stored = await storage.read(list(keys))
        assert {key: item.value["i"] for key, item in stored.items()} == keys
        listed = [key async for key in storage.list("chan/users/")]
        assert sorted(listed) == sorted(k for k in keys if k.startswith("chan/users/"))

    @pytest.mark.parametrize(
        "key", ["", "a//b", "/abs", "a/", "../up", "a/../b", "a/./b", ".", "nul\x00", "\ud800"]
    )
    async def test_malformed_keys_are_refused(self, storage: Storage, key: Any) -> None:
        with pytest.raises(InvalidKeyError):
            await storage.write({key: StoreItem({"v": 1})})
        with pytest.raises(InvalidKeyError):
            await storage.read([key])
        with pytest.raises(InvalidKeyError):
            await storage.delete([key])

    async def test_non_string_keys_are_refused(self, storage: Storage) -> None:
        with pytest.raises(InvalidKeyError):
            await storage.read([42])  # type: ignore[list-item]
        with pytest.raises(InvalidKeyError):
            await storage.read("k/a")  # a lone string would iterate as one-character keys

    @pytest.mark.parametrize("keys", [None, 42, object()])
    async def test_a_batch_that_is_no_list_of_keys_is_refused_before_any_io(
        self, harness: Harness, keys: Any
    ) -> None:
        """`read(None)` and `delete(None)` were a plain TypeError from iterating None."""
        closed = await harness.open_another()
        if closed is harness.storage:
            closed = type(harness.storage)()
        await closed.close()  # any I/O now fails: the refusal must come first
        for storage in (harness.storage, closed):
            with pytest.raises(InvalidKeyError, match="list of keys"):
                await storage.read(keys)
            with pytest.raises(InvalidKeyError, match="list of keys"):
                await storage.delete(keys)
            with pytest.raises(InvalidValueError, match="mapping"):
                await storage.write(keys)

    async def test_one_megabyte_documents(self, storage: Storage) -> None:
        value = {"blob": "x" * 1_000_000, "items": list(range(20_000))}
        await create(storage, "k/big", value)
        assert (await storage.read(["k/big"]))["k/big"].value == value

    async def test_oversized_document_fails_before_anything_is_written(
        self, storage: Storage
    ) -> None:
        too_big = {"blob": "x" * (storage.max_document_bytes + 1)}
        with pytest.raises(StateTooLargeError) as info:
            await storage.write({"k/small": StoreItem({"ok": True}), "k/huge": StoreItem(too_big)})
        assert info.value.key == "k/huge" and info.value.limit == storage.max_document_bytes
        assert await storage.read(["k/small", "k/huge"]) == {}

    async def test_no_aliasing_either_way(self, storage: Storage) -> None:
        value: dict[str, Any] = {"list": [1, {"deep": "a"}]}
        await create(storage, "k/alias", value)
        value["list"][1]["deep"] = "changed by caller after write"
        first = (await storage.read(["k/alias"]))["k/alias"].value
        assert first == {"list": [1, {"deep": "a"}]}
        first["list"].append("changed by caller after read")
        second = (await storage.read(["k/alias"]))["k/alias"].value
        assert second == {"list": [1, {"deep": "a"}]}

    @pytest.mark.parametrize(
        "bad_value, error",
        [
            ([1, 2], InvalidValueError),
            ("text", InvalidValueError),
            ({"f": {1, 2}}, InvalidValueError),
            ({"o": object()}, InvalidValueError),
        ],
    )
    async def test_invalid_values_fail_before_anything_is_written(
        self, storage: Storage, bad_value: Any, error: Any
    ) -> None:
        with pytest.raises(error):
            await storage.write({"k/good": StoreItem({"ok": 1}), "k/bad": StoreItem(bad_value)})
        assert await storage.read(["k/good", "k/bad"]) == {}

    async def test_invalid_arguments_are_refused(self, storage: Storage) -> None:
        with pytest.raises(InvalidValueError):
            await storage.write({"k/a": {"not": "a StoreItem"}})  # type: ignore[dict-item]
        with pytest.raises(InvalidValueError):
            await storage.write({"k/a": StoreItem({"v": 1}, "")})
        for ttl in (0, -1, float("nan"), True, "10"):
            with pytest.raises(InvalidValueError):
                await storage.write({"k/a": StoreItem({"v": 1})}, ttl=ttl)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            await storage.delete(["k/a"], if_match={"k/other": "1"})
        assert await storage.read(["k/a"]) == {}

    async def test_delete_if_match_that_is_not_a_mapping_is_refused(self, storage: Storage) -> None:
        etag = await create(storage, "k/a", {"v": 1})
        with pytest.raises(InvalidValueError):
            await storage.delete(["k/a"], if_match=etag)  # type: ignore[arg-type]
        assert (await storage.read(["k/a"]))["k/a"] == StoreItem({"v": 1}, etag)

    async def test_a_document_planted_under_another_key_is_refused_and_kept(
        self, harness: Harness
    ) -> None:
        """A's valid envelope stored as B (a file copied under another user's name) is never
        served as B's, and no conditional write or delete of B replaces it."""
        ada, bob = "c/users/ada", "c/users/bob"
        etag = await create(harness.storage, ada, {"secret": "ada's"})
        raw = await harness.get_raw(ada)
        assert raw is not None
        await harness.put_raw(bob, raw)
        planted = await harness.get_raw(bob)
        with pytest.raises(FormatError) as info:
            await harness.storage.read([bob])
        assert info.value.key == bob
        for expected in (None, etag):  # create-only, or the version that A's envelope names
            with pytest.raises(ConflictError):
                await harness.storage.write({bob: StoreItem({"mine": "bob's"}, expected)})
        with pytest.raises(ConflictError):
            await harness.storage.delete([bob], if_match={bob: etag})
        assert await harness.get_raw(bob) == planted
        assert (await harness.storage.read([ada]))[ada] == StoreItem({"secret": "ada's"}, etag)

    async def test_invalid_input_is_checked_before_any_io(self, harness: Harness) -> None:
        """A closed store fails every I/O; bad input must be refused before that point."""
        another = await harness.open_another()
        if another is harness.storage:
            another = type(harness.storage)()
        await another.close()
        with pytest.raises(InvalidKeyError):
            await another.write({"a//b": StoreItem({})})
        with pytest.raises(InvalidValueError):
            await another.write({"k/a": StoreItem([])})  # type: ignore[arg-type]
        with pytest.raises(StorageUnavailableError):
            await another.read(["k/a"])

    @pytest.mark.parametrize(
        "raw",
        [
            orjson.dumps({"v": 2, "key": "k/f", "meta": {}, "data": {"from": "the future"}}),
            orjson.dumps({"v": "1", "data": {}}),
            orjson.dumps({"just": "a document"}),
            b"\x00not json at all",
        ],
        ids=["newer-version", "string-version", "no-envelope", "garbage"],
    )
    async def test_unknown_formats_are_refused_and_left_intact(
        self, harness: Harness, raw: Any
    ) -> None:
        if not raw.startswith(b"{") and not harness.stores_bytes:
            pytest.skip(f"{type(harness.storage).__name__} holds JSON documents, not bytes")
        await harness.put_raw("k/f", raw)
        with pytest.raises(FormatError) as info:
            await harness.storage.read(["k/f"])
        assert info.value.key == "k/f"
        with pytest.raises(ConflictError):  # the reader had no version, so a create must not win
            await harness.storage.write({"k/f": StoreItem({"fresh": True}, None)})
        assert await harness.get_raw("k/f") == raw

    async def test_stored_envelope_has_format_version_and_metadata(self, harness: Harness) -> None:
        await create(harness.storage, "k/env", {"a": 1})
        raw = await harness.get_raw("k/env")
        assert raw is not None
        envelope = orjson.loads(raw)
        assert envelope["v"] == 1 and envelope["data"] == {"a": 1}
        assert envelope["key"] == "k/env" and "updated_at" in envelope["meta"]

    async def test_list_by_prefix(self, storage: Storage) -> None:
        keys = ["t/users/1", "t/users/2", "t/users2/x", "t/conversations/c", "u/users/1"]
        await storage.write({k: StoreItem({}) for k in keys})
        assert sorted([k async for k in storage.list("t/users/")]) == ["t/users/1", "t/users/2"]
        assert sorted([k async for k in storage.list("t/")]) == sorted(
            k for k in keys if k[0] == "t"
        )
        assert sorted([k async for k in storage.list()]) == sorted(keys)
        assert [k async for k in storage.list("none/")] == []

    async def test_read_checks_hold_when_the_batch_lands(self, storage: Storage) -> None:
        seen = await create(storage, "k/seen", {"v": 1})
        await storage.write(
            {"k/out": StoreItem({"v": 1})}, unchanged={"k/seen": seen, "k/no": None}
        )
        await storage.write({"k/seen": StoreItem({"v": 2}, seen)})  # another writer moves on
        batch = {"k/out": StoreItem({"v": 2}, "*")}
        with pytest.raises(ConflictError) as info:
            await storage.write(batch, unchanged={"k/seen": seen})
        assert info.value.keys == ["k/seen"]
        assert (await storage.read(["k/out"]))["k/out"].value == {"v": 1}
        assert (await storage.read(["k/seen"]))["k/seen"].value == {"v": 2}
        for bad in ({"k/out": "1"}, {"k/x": "*"}, {"k/x": ""}, {"a//b": None}):
            with pytest.raises((InvalidValueError, InvalidKeyError)):
                await storage.write(batch, unchanged=bad)

    async def test_a_ttl_per_document_overrides_the_batch_ttl(self, storage: Storage) -> None:
        ttl = 0.5
        batch = {
            "k/short": StoreItem({"v": 1}, ttl=ttl),
            "k/batch": StoreItem({"v": 1}),
            "k/long": StoreItem({"v": 1}, ttl=3600),
        }
        await storage.write(batch, ttl=1800)
        written_at = time.monotonic()
        while "k/short" in await storage.read(["k/short"]):
            assert time.monotonic() - written_at < 10, "document outlived its TTL by far"
            await asyncio.sleep(0.05)  # waiting for the clock, not for another task
        assert sorted(await storage.read(["k/short", "k/batch", "k/long"])) == ["k/batch", "k/long"]
        with pytest.raises(InvalidValueError):
            await storage.write({"k/bad": StoreItem({"v": 1}, ttl=-1)})
        assert await storage.read(["k/bad"]) == {}

    async def test_a_read_reports_each_documents_remaining_ttl(self, storage: Storage) -> None:
        await storage.write({"t/a": StoreItem({"v": 1}, ttl=600), "t/b": StoreItem({"v": 1})})
        await storage.write({"t/c": StoreItem({"v": 1})}, ttl=300)  # one key: no commit
        found = await storage.read(["t/a", "t/b", "t/c"])
        a, c = found["t/a"].ttl, found["t/c"].ttl
        assert a is not None and 590 < a <= 600, a
        assert c is not None and 290 < c <= 300, c
        assert found["t/b"].ttl is None
        await storage.write({"t/c": StoreItem({"v": 2}, found["t/c"].etag)})  # no TTL now
        assert (await storage.read(["t/c"]))["t/c"].ttl is None

    async def test_ttl_expiry(self, storage: Storage) -> None:
        ttl = 0.5
        await storage.write({"k/ttl": StoreItem({"v": 1}), "k/keep": StoreItem({"v": 1})}, ttl=None)
        written_at = time.monotonic()
        await storage.write({"k/ttl": StoreItem({"v": 2}, "*")}, ttl=ttl)
        present = "k/ttl" in await storage.read(["k/ttl"])
        assert present or time.monotonic() - written_at >= ttl  # only a stalled machine may miss it
        while "k/ttl" in await storage.read(["k/ttl"]):
            assert time.monotonic() - written_at < 10, "document outlived its TTL by far"
            await asyncio.sleep(0.05)  # waiting for the clock, not for another task
        assert time.monotonic() - written_at >= ttl * 0.9, "document expired before its TTL"
        assert [k async for k in storage.list("k/")] == ["k/keep"]
        assert await create(storage, "k/ttl", {"v": 3})  # an expired key can be created again

    async def test_longest_ttl_is_kept_and_a_longer_one_refused_before_io(
        self, storage: Storage
    ) -> None:
        limit = storage.max_ttl_seconds
        longest = limit if math.isfinite(limit) else sys.float_info.max
        await storage.write({"k/long": StoreItem({"v": 1})}, ttl=longest)
        assert (await storage.read(["k/long"]))["k/long"].value == {"v": 1}
        if math.isfinite(limit):
            for ttl in (limit * 1.5, sys.float_info.max):
                with pytest.raises(InvalidValueError):
                    await storage.write({"k/long": StoreItem({"v": 2}, "*")}, ttl=ttl)
            assert (await storage.read(["k/long"]))["k/long"].value == {"v": 1}

    async def test_closed_storage_refuses_io(self, harness: Harness) -> None:
        another = await harness.open_another()
        if another is harness.storage:
            another = type(harness.storage)()
        async with another as opened:
            assert opened is another
        with pytest.raises(StorageUnavailableError):
            await another.read(["k/a"])
        with pytest.raises(StorageUnavailableError):
            await another.write({"k/a": StoreItem({})})
