"""FileStorage beyond the contract: file names, containment, processes, crashes, OS errors."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_state import open_storage, user_key
from agent_state.backends import (
    CONFLICT,
    ConflictError,
    FileStorage,
    FormatError,
    InvalidKeyError,
    Outcomes,
    StorageConfigError,
    StorageUnavailableError,
    StoreItem,
    wrap,
)
from agent_state.backends.file.fileio import TEMP_PREFIX, temp_tag
from agent_state.backends.file.filelock import StripedFileLocks
from agent_state.backends.file.filenames import (
    MAX_NAME_BYTES,
    is_hashed,
    key_for_name,
    name_for_key,
)
from agent_state.backends.file.storage import LOCK_DIR, STALE_TEMP_SECONDS
from agent_state.backends.testing import create
from tests.backends.file_worker import checked_document

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("file_worker.py")

segments = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"), min_size=1
).filter(lambda s: s not in (".", ".."))
keys = st.lists(st.one_of(segments, segments.map(lambda s: s * 40)), min_size=1, max_size=4).map(
    "/".join
)


def data_files(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if not name.startswith("."))


def temp_files(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if name.startswith(TEMP_PREFIX))


# --- file names ---------------------------------------------------------------------


@given(keys)
def test_file_names_are_reversible_short_and_case_free(key: str) -> None:
    name = name_for_key(key)
    assert len(name.encode()) <= MAX_NAME_BYTES
    assert name.isascii() and name == name.lower() and "/" not in name
    assert not name.startswith(".")
    if is_hashed(name):
        assert key_for_name(name) is None and name == "#" + hashlib.sha256(key.encode()).hexdigest()
    else:
        assert key_for_name(name) == key


@given(keys)
def test_keys_differing_only_in_case_never_share_a_file_name(key: str) -> None:
    other = key.swapcase()
    if other != key:
        assert name_for_key(key).casefold() != name_for_key(other).casefold()


def test_foreign_and_non_canonical_names_decode_to_no_key() -> None:
    assert key_for_name("a+b") == "a/b" and key_for_name("!ada") == "Ada"
    for name in [".locks", ".tmp-1", "A", "=61", "a++b", "+a", "=2e=2e", "=ff", "a b", "!"]:
        assert key_for_name(name) is None, name


async def test_case_variants_are_separate_files(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    variants = [user_key("c", ident) for ident in ("Ada", "ada", "ADA", "aDa")]
    await storage.write({key: StoreItem({"i": i}) for i, key in enumerate(variants)})
    assert len({name.casefold() for name in data_files(tmp_path)}) == len(variants)
    stored = await storage.read(variants)
    assert [stored[key].value["i"] for key in variants] == list(range(len(variants)))


# --- containment --------------------------------------------------------------------

HOSTILE_KEYS = [
    "a" * 10_000,
    "🙂" * 300,
    "%2e%2e/%2E%2E",
    "..%2F..%2Fetc/passwd",
    "a..b/...",
    ".hidden/x",
    "~root",
    "back\\slash/..\\..\\x",
    "c:\\windows",
    "con/aux.txt",
    " space /\ttab",
    "\u202eevil",
    "e\u0301/é",
    "x" * 300 + "/" + "y" * 300,
    ".locks",
    ".tmp-x",
]


async def test_hostile_keys_stay_inside_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    storage = FileStorage(root)
    await storage.write({key: StoreItem({"key": key}, None) for key in HOSTILE_KEYS})

    assert os.listdir(tmp_path) == ["store"]
    for directory, subdirs, files in os.walk(root):
        assert Path(directory) in (root, root / LOCK_DIR) and subdirs in ([LOCK_DIR], [])
        assert all(len(name.encode()) <= MAX_NAME_BYTES for name in files)
    assert len(data_files(root)) == len(HOSTILE_KEYS)
    stored = await storage.read(HOSTILE_KEYS)
    assert {key: item.value["key"] for key, item in stored.items()} == {k: k for k in HOSTILE_KEYS}
    assert sorted([key async for key in storage.list()]) == sorted(HOSTILE_KEYS)

    for bad in ["../x", "a/../../x", "/etc/passwd", "..", "a/./b", "nul\x00/x"]:
        with pytest.raises(InvalidKeyError):
            await storage.write({bad: StoreItem({})})
    assert len(data_files(root)) == len(HOSTILE_KEYS)


@pytest.mark.parametrize("ident", ["x" * 10_000, "🙂" * 10_000])
async def test_ten_thousand_character_ids(tmp_path: Path, ident: str) -> None:
    storage = FileStorage(tmp_path)
    key = user_key("chan", ident)
    etag = (await storage.write({key: StoreItem({"v": 1}, None)}))[key]
    etag = (await storage.write({key: StoreItem({"v": 2}, etag)}))[key]
    assert (await storage.read([key]))[key] == StoreItem({"v": 2}, etag)
    assert [k async for k in storage.list("chan/users/")] == [key]
    assert [k async for k in storage.list("chan/users/y")] == []
    assert all(is_hashed(name) for name in data_files(tmp_path))
    await storage.delete([key], if_match={key: etag})
    assert data_files(tmp_path) == []


# --- leftovers and TTL ----------------------------------------------------------------


async def test_orphan_temp_files_are_removed_on_open_and_by_list(tmp_path: Path) -> None:
    """A temp file whose lock stripe is free has no writer: removed at once, whatever its age.
    One without a stripe of ours (another version's) goes when it is stale."""
    storage = FileStorage(tmp_path)
    await storage.write({"k/a": StoreItem({"a": 1})})
    orphan = f"{TEMP_PREFIX}042-{'0' * 32}"
    assert temp_tag(orphan) == "042"
    fresh, stale = f"{TEMP_PREFIX}fresh", f"{TEMP_PREFIX}999-{'1' * 32}"
    for name in (orphan, fresh, stale):
        (tmp_path / name).write_bytes(b'{"v":1,"tor')
    old = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(tmp_path / stale, (old, old))
    FileStorage(tmp_path)
    assert temp_files(tmp_path) == [fresh]

    (tmp_path / orphan).write_bytes(b'{"v":1,"tor')
    assert [k async for k in storage.list()] == ["k/a"]
    assert temp_files(tmp_path) == [fresh]
    assert (await storage.read(["k/a"]))["k/a"].value == {"a": 1}


async def test_opening_removes_the_temp_file_of_a_killed_writer_not_of_a_live_one(
    tmp_path: Path,
) -> None:
    storage = FileStorage(tmp_path)
    etag = await create(storage, "k/doc", {"v": 1})
    writer = spawn("stall-write", str(tmp_path), "k/doc")
    try:
        assert writer.stdout.readline().strip() == "stalled"  # its temp file is written
        temps = temp_files(tmp_path)
        assert len(temps) == 1
        FileStorage(tmp_path)  # the writer is alive and holds the key's lock
        assert temp_files(tmp_path) == temps
    finally:
        writer.kill()
        writer.wait()
    assert temp_files(tmp_path) == temps  # the kill left it behind
    FileStorage(tmp_path)
    assert temp_files(tmp_path) == []
    assert (await storage.read(["k/doc"]))["k/doc"] == StoreItem({"v": 1}, etag)


async def test_ttl_is_stored_in_the_file_and_expired_documents_are_absent(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    await storage.write({"k/live": StoreItem({"v": 1})}, ttl=3600)
    meta = orjson.loads(storage.path_for("k/live").read_bytes())["meta"]
    assert time.time() + 3500 < meta["expires_at"] < time.time() + 3601
    assert "k/live" in await FileStorage(tmp_path).read(["k/live"])

    past = time.time() - 1
    for key in ("k/old", "k/gone"):
        raw = wrap(key, orjson.dumps({"old": True}), "old-etag", expires_at=past)
        storage.path_for(key).write_bytes(raw)
    assert await storage.read(["k/old", "k/gone"]) == {}
    with pytest.raises(ConflictError):
        await storage.write({"k/old": StoreItem({"v": 2}, "old-etag")})
    await storage.write({"k/old": StoreItem({"new": True}, None)})  # expired counts as absent
    assert (await storage.read(["k/old"]))["k/old"].value == {"new": True}
    assert [k async for k in storage.list("k/")] == ["k/live", "k/old"]
    assert not storage.path_for("k/gone").exists()  # list removed the expired document


async def test_list_skips_foreign_hash_names_and_lists_newer_hashed_documents(
    tmp_path: Path,
) -> None:
    """Only the store's own `#<sha256>` names are read for their key; others are foreign files.

    A long key's document in a newer format is listed like a short key's (its read then raises
    FormatError), instead of failing every `list` whatever the prefix.
    """
    storage = FileStorage(tmp_path)
    short, long_key = "k/a", "k/" + "x" * 300
    await storage.write({short: StoreItem({})})
    newer = {"v": 2, "key": long_key, "meta": {}, "data": {}}
    storage.path_for(long_key).write_bytes(orjson.dumps(newer))
    for foreign in ("#notes#", "#" + "0" * 64 + ".bak", "#"):
        (tmp_path / foreign).write_text("an editor's autosave, not a document")
    assert [k async for k in storage.list("k/")] == [short, long_key]
    assert [k async for k in storage.list("other/")] == []
    with pytest.raises(FormatError):
        await storage.read([long_key])


# --- locks ----------------------------------------------------------------------------


async def test_a_cancelled_lock_wait_does_not_leak_the_lock(tmp_path: Path) -> None:
    first, second = StripedFileLocks(tmp_path, timeout=10), StripedFileLocks(tmp_path, timeout=10)
    acquired, release = threading.Event(), threading.Event()

    def hold() -> None:
        acquired.set()
        release.wait(10)

    holder = asyncio.create_task(first.run(["k"], hold))
    assert await asyncio.to_thread(acquired.wait, 5)
    with pytest.raises(asyncio.TimeoutError):  # blocked by the other instance's holder
        await asyncio.wait_for(second.run(["k"], lambda: None), 0.2)
    release.set()
    await holder
    assert await asyncio.wait_for(second.run(["k"], lambda: "second"), 5) == "second"
    assert await asyncio.wait_for(first.run(["k"], lambda: "first"), 5) == "first"


def test_one_storage_serves_one_event_loop_after_another(tmp_path: Path) -> None:
    """Apps and test suites that call `asyncio.run` per job may share one FileStorage."""
    storage = FileStorage(tmp_path)

    async def contended_writes(loop_number: int) -> None:
        writes = [storage.write({"k/a": StoreItem({"i": i}, "*")}) for i in range(4)]
        await asyncio.gather(*writes)  # all on one key: they queue on its lock
        assert (await storage.read(["k/a"]))["k/a"].value["i"] in range(4), loop_number

    for loop_number in range(2):
        asyncio.run(contended_writes(loop_number))


async def test_a_lock_held_by_another_process_times_out_then_writes_work_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    storage = open_storage("file://./store", lock_timeout=0.3)
    assert isinstance(storage, FileStorage)
    etag = await create(storage, "k/doc", {"v": 1})
    before = storage.path_for("k/doc").read_bytes()
    holder = spawn("hold-lock", str(tmp_path / "store"), "k/doc")
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError, match=r"'k/doc'.*lock_timeout of 0\.3 s"):
            await storage.write({"k/doc": StoreItem({"v": 2}, etag)})
        assert time.monotonic() - started >= 0.3
        with pytest.raises(StorageUnavailableError, match="'k/doc'"):
            await storage.delete(["k/doc"])
        assert storage.path_for("k/doc").read_bytes() == before
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
    etag = (await storage.write({"k/doc": StoreItem({"v": 2}, etag)}))["k/doc"]
    assert (await storage.read(["k/doc"]))["k/doc"] == StoreItem({"v": 2}, etag)


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


async def test_two_processes_incrementing_lose_no_update(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    await storage.write({"race/n": StoreItem({"n": 0}, None)})
    times = 150
    workers = [spawn("increment", str(tmp_path), "race/n", str(times)) for _ in range(2)]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        for worker in workers:
            assert int(worker.stdout.readline()) >= 0
            assert worker.wait(timeout=60) == 0
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    assert (await storage.read(["race/n"]))["race/n"].value == {"n": 2 * times}


async def test_writer_killed_mid_write_never_leaves_a_torn_document(tmp_path: Path) -> None:
    """Each round kills a writer during its (round % 4 + 1)-th write: the document must be
    complete and no older than the last write the writer saw return."""
    storage = FileStorage(tmp_path)
    size = 2_000_000
    await storage.write({"crash/doc": StoreItem(checked_document(-1, size))})
    stored_seq, killed_mid_write = -1, 0
    for round_ in range(12):  # each kill phase (1st to 4th write) three times
        temps_before = {n for n in os.listdir(tmp_path) if n.startswith(TEMP_PREFIX)}
        first = 1000 * round_
        worker = spawn("write-loop", str(tmp_path), "crash/doc", str(size), str(first))
        try:
            assert worker.stdout.readline().strip() == "writing"
            acknowledged = [int(worker.stdout.readline()) for _ in range(round_ % 4)]
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # kill as soon as the next write is in flight
                if any(n.startswith(TEMP_PREFIX) for n in set(os.listdir(tmp_path)) - temps_before):
                    break
            worker.send_signal(signal.SIGKILL)
        finally:
            worker.kill()
            worker.wait()
        temps_after = {n for n in os.listdir(tmp_path) if n.startswith(TEMP_PREFIX)}
        killed_mid_write += bool(temps_after - temps_before)

        document = (await storage.read(["crash/doc"]))["crash/doc"].value
        assert document == checked_document(document["seq"], size)  # complete, never torn
        oldest_allowed = acknowledged[-1] if acknowledged else stored_seq
        assert document["seq"] == stored_seq or document["seq"] >= first
        assert document["seq"] >= oldest_allowed
        assert [k async for k in storage.list()] == ["crash/doc"]
        stored_seq = document["seq"]
    assert killed_mid_write > 0  # the test did hit writes in flight


# --- errors and URLs ------------------------------------------------------------------


def test_root_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    regular = tmp_path / "regular"
    regular.write_text("not a directory")
    for root in (regular, regular / "below"):
        with pytest.raises(StorageConfigError, match="is not a directory") as info:
            FileStorage(root)
        assert isinstance(info.value.__cause__, OSError)
    assert regular.read_text() == "not a directory"


@pytest.mark.parametrize("root", ["", "a\x00b", b"/tmp/x", 42])
def test_an_empty_or_unusable_root_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: bytes | int | str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageConfigError, match="non-empty path"):
        FileStorage(root)  # type: ignore[arg-type]  # the wrong type is the point
    assert os.listdir(tmp_path) == []


def test_the_file_system_root_is_refused(tmp_path: Path) -> None:
    """Not even `.locks` is created there (a first read used to create `/.locks`)."""
    (tmp_path / "to-root").symlink_to("/")
    for root in ("/", "/..", tmp_path / "to-root"):
        with pytest.raises(StorageConfigError, match="file system root"):
            FileStorage(root)
    with pytest.raises(StorageConfigError, match="file system root"):
        FileStorage.from_url("file:///")


@pytest.mark.parametrize("lock_timeout", [-1, float("nan"), float("inf"), "3", True, None])
def test_a_bad_lock_timeout_is_a_config_error(tmp_path: Path, lock_timeout: object) -> None:
    with pytest.raises(StorageConfigError, match="lock_timeout"):
        FileStorage(tmp_path / "store", lock_timeout=lock_timeout)  # type: ignore[arg-type]  # the point
    assert not (tmp_path / "store").exists()


async def test_os_errors_during_io_are_unavailable_with_the_cause(tmp_path: Path) -> None:
    root = tmp_path / "store"
    storage = FileStorage(root)
    await storage.write({"k/a": StoreItem({"a": 1})})
    shutil.rmtree(root)
    root.write_text("now a file")

    async def listed() -> list[str]:
        return [k async for k in storage.list()]

    for attempt in (
        storage.read(["k/a"]),
        storage.write({"k/a": StoreItem({"a": 2})}),
        storage.delete(["k/a"]),
        listed(),
    ):
        with pytest.raises(StorageUnavailableError) as info:
            await attempt
        assert isinstance(info.value.__cause__, OSError)


async def test_read_after_the_directory_vanished_is_unavailable_not_missing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    storage = FileStorage(root)
    await storage.write({"k/a": StoreItem({"a": 1})})
    shutil.rmtree(root)
    for keys in (["k/a"], ["k/never-written"]):
        with pytest.raises(StorageUnavailableError) as info:
            await storage.read(keys)
        assert isinstance(info.value.__cause__, FileNotFoundError)


async def test_from_url_relative_absolute_and_open_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = FileStorage.from_url("file://./data")
    assert relative.root == tmp_path / "data" and relative.root.is_dir()
    (tmp_path / "below").mkdir()
    monkeypatch.chdir(tmp_path / "below")
    parent = FileStorage.from_url("file://../up%3Fdir")
    assert parent.root.resolve() == tmp_path / "up?dir" and parent.root.is_dir()
    monkeypatch.chdir(tmp_path)
    absolute = FileStorage.from_url(f"file://{tmp_path}/with%20space")
    assert absolute.root == tmp_path / "with space" and absolute.root.is_dir()

    opened = open_storage("file://./data", max_document_bytes=1000)
    assert isinstance(opened, FileStorage) and opened.max_document_bytes == 1000
    await opened.write({"k/a": StoreItem({"a": 1})})
    again = open_storage(f"file://{tmp_path}/data")
    assert (await again.read(["k/a"]))["k/a"].value == {"a": 1}
    for bad in ("file://", "memory://x", "/no/scheme"):
        with pytest.raises(StorageConfigError):
            FileStorage.from_url(bad)


@pytest.mark.parametrize(
    "url, named",
    [
        ("file://host/abs", "names a host 'host'"),
        ("file://localhost/abs", "names a host 'localhost'"),
        ("file://data", "names a host 'data'"),
        ("file://%2E/x", "names a host '%2E'"),
        ("file://~/x", "'~' is not expanded"),
        ("file://~me/x", "'~' is not expanded"),
        ("file://./x?ttl=3", "has a query '?ttl=3'"),
        ("file://./x?", "has a query '?'"),
        ("file:///abs/x#part", "has a fragment '#part'"),
        ("file://host/x#a?b", "has a fragment '#a?b'"),
    ],
)
def test_from_url_refuses_what_it_does_not_understand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, named: str
) -> None:
    """`file://host/abs` was silently the relative `./host/abs`; options were part of the path."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StorageConfigError, match=re.escape(named)):
        FileStorage.from_url(url)
    with pytest.raises(StorageConfigError, match=re.escape(named)):
        open_storage(url)
    assert os.listdir(tmp_path) == []


# --- a document under another key's name ------------------------------------------------


async def test_a_file_copied_under_another_users_name_is_refused_and_kept(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    for ada, bob in [
        ("c/users/ada", "c/users/bob"),
        ("c/users/" + "a" * 300, "c/users/" + "b" * 300),
    ]:
        etag = await create(storage, ada, {"secret": "ada's"})
        shutil.copyfile(storage.path_for(ada), storage.path_for(bob))
        copied = storage.path_for(bob).read_bytes()
        with pytest.raises(FormatError, match="belongs to another key") as info:
            await storage.read([bob])
        assert info.value.key == bob
        for expected in (None, etag):
            with pytest.raises(ConflictError):
                await storage.write({bob: StoreItem({"mine": "bob's"}, expected)})
        with pytest.raises(ConflictError):
            await storage.delete([bob], if_match={bob: etag})
        assert storage.path_for(bob).read_bytes() == copied
        assert (await storage.read([ada]))[ada] == StoreItem({"secret": "ada's"}, etag)


async def test_an_expired_document_under_another_keys_name_is_neither_absent_nor_removed(
    tmp_path: Path,
) -> None:
    storage = FileStorage(tmp_path)
    planted = wrap("c/users/ada", b"{}", "ada-etag", expires_at=time.time() - 1)
    storage.path_for("c/users/bob").write_bytes(planted)
    with pytest.raises(ConflictError):  # not "expired, so absent": it is not bob's document
        await storage.write({"c/users/bob": StoreItem({"mine": "bob's"}, None)})
    assert [k async for k in storage.list("c/users/")] == []  # expired, yet not removed by list
    assert storage.path_for("c/users/bob").read_bytes() == planted


async def test_a_batch_costs_at_most_one_worker_thread_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = FileStorage(tmp_path)
    keys = [f"k/{i}" for i in range(5)]
    etags = await storage.write({key: StoreItem({"n": 0}, None) for key in keys})
    calls: list[Callable[..., object]] = []
    real = asyncio.to_thread

    async def counted(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        calls.append(function)
        return await real(function, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    found = await storage.read([*keys, "k/missing"])
    assert {key: item.value for key, item in found.items()} == dict.fromkeys(keys, {"n": 0})
    assert calls == []  # reads run in the loop's thread
    outcomes: Outcomes = {}
    writes = [storage._prepare(key, StoreItem({"n": 1}, etags[key])) for key in keys]
    await storage._write(writes, outcomes)
    assert len(calls) == 1 and set(outcomes) == set(keys)
    assert all(item.value == {"n": 1} for item in (await storage.read(keys)).values())


async def test_a_batch_syncs_each_file_and_the_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each document's bytes reach the disk before its rename, and one fsync of the folder
    makes the batch's renames durable before the write returns, even when a key conflicts."""
    storage = FileStorage(tmp_path)
    keys = [f"k/{i}" for i in range(5)]
    etags = await storage.write({key: StoreItem({"n": 0}, None) for key in keys})
    synced: list[str] = []
    real = os.fsync

    def counted(fd: int) -> None:
        synced.append("folder" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    outcomes: Outcomes = {}
    writes = [storage._prepare(key, StoreItem({"n": 1}, etags[key])) for key in keys[:4]]
    await storage._write(writes, outcomes)  # one batch of the store (a commit makes several)
    assert sorted(synced) == ["file"] * 4 + ["folder"]
    synced.clear()
    stale = [storage._prepare("k/0", StoreItem({"n": 2}, etags["k/0"]))]
    fresh = [storage._prepare("k/4", StoreItem({"n": 2}, etags["k/4"]))]
    await storage._write(stale + fresh, outcomes)
    assert outcomes["k/0"] is CONFLICT and isinstance(outcomes["k/4"], str)
    assert sorted(synced) == ["file", "folder"]


async def test_a_write_or_delete_batch_hands_off_to_a_thread_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's blocking work (locks, files, the folder's fsync) is one worker-thread call,
    however many keys it has: each hand-off costs a turn more than its file work."""
    storage = FileStorage(tmp_path)
    keys = [f"c/users/u{i}" for i in range(3)]
    await storage.write({key: StoreItem({"n": 1}) for key in keys[:1]})
    for key in keys[1:]:
        await storage.write({key: StoreItem({"n": 1})})
    hand_offs: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        hand_offs.append(getattr(function, "__name__", "?"))
        return await to_thread(function, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    found = await storage.read(keys)
    assert hand_offs == []  # reads run in the loop's thread
    await storage.write({keys[0]: StoreItem({"n": 2}, found[keys[0]].etag)})
    assert len(hand_offs) == 1
    etag = found[keys[1]].etag
    assert etag is not None
    await storage.delete(keys, if_match={keys[1]: etag})
    assert len(hand_offs) == 2
    assert await storage.read(keys) == {}


async def test_a_listing_finds_every_key_under_its_prefix_and_no_other(tmp_path: Path) -> None:
    """Keys with escaped characters (capitals, a leading dot, `%`, non-ASCII) and a key too long
    for a name (hashed): every prefix of every key lists exactly the keys that start with it,
    though a listing decodes only the names its prefix's spelling starts."""
    storage = FileStorage(tmp_path)
    keys = ["a/B/c", "a/b/c", "a/bé/x", ".d/e", "a/%2F/f", "A", "a/b", "z" * 300, "z" * 299 + "y"]
    await storage.write({key: StoreItem({"k": key}) for key in keys})
    for key in keys:
        for end in range(len(key) + 1):
            prefix = key[:end]
            expected = sorted(k for k in keys if k.startswith(prefix))
            assert [k async for k in storage.list(prefix)] == expected, prefix
