"""BlobStorage beyond the shared contract, on real Azurite servers over HTTP.

Races between two clients, names at Azure's limits, the name mapping's properties, a server
stopped and restarted mid-run (a private Azurite per test, stopped by its PID), credentials,
lazy removal of expired blobs and configuration errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import string
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.core.pipeline.transport import AioHttpTransport
from hypothesis import given
from hypothesis import strategies as st

from agent_state import open_storage
from agent_state.backends import (
    BlobStorage,
    ConflictError,
    StorageConfigError,
    StorageUnavailableError,
    StoreItem,
    wrap,
)
from agent_state.backends.blob.names import (
    MAX_NAME_CHARS,
    MAX_SEGMENTS,
    blob_name,
    is_hashed,
    key_for_name,
    list_prefix,
)
from agent_state.backends.blob.storage import EXPIRES_METADATA
from tests.backends.conformance.harness_blob import (
    azurite_connection_string,
    delete_container,
    fresh_container,
    open_container,
)
from tests.conftest import server_missing
from tests.net import free_port

ROOT = Path(__file__).resolve().parents[2]
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
WRONG_KEY = "d3JvbmcgYWNjb3VudCBrZXkgZm9yIHRoZSBkZXYgc3RvcmUgYWNjb3VudCEhISE="


def dev_connection_string(port: int, key: str = DEV_KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{DEV_ACCOUNT};"
    )


@pytest.fixture
async def storage() -> AsyncIterator[BlobStorage]:
    store = await open_container(azurite_connection_string(), fresh_container())
    yield store
    await delete_container(store)
    await store.close()


@contextlib.asynccontextmanager
async def second_client(store: BlobStorage, **options: Any) -> AsyncIterator[BlobStorage]:
    other = BlobStorage(
        store.container.container_name,
        connection_string=azurite_connection_string(),
        create_container=False,
        **options,
    )
    try:
        yield other
    finally:
        await other.close()


# --- races between two clients -------------------------------------------------------------


async def test_if_match_race_between_two_clients_has_exactly_one_winner(
    storage: BlobStorage,
) -> None:
    async with second_client(storage) as other:
        for round_ in range(10):
            key = f"race/match-{round_}"
            etag = (await storage.write({key: StoreItem({"v": 0}, None)}))[key]
            results = await asyncio.gather(
                storage.write({key: StoreItem({"by": "a"}, etag)}),
                other.write({key: StoreItem({"by": "b"}, etag)}),
                return_exceptions=True,
            )
            won = [r for r in results if isinstance(r, dict)]
            lost = [r for r in results if isinstance(r, ConflictError)]
            assert len(won) == 1 and len(lost) == 1, results
            assert lost[0].keys == [key]
            stored = (await other.read([key]))[key]
            assert stored.etag == won[0][key]
            assert stored.value == {"by": "a" if results[0] is won[0] else "b"}


async def test_create_only_race_between_two_clients_has_exactly_one_winner(
    storage: BlobStorage,
) -> None:
    async with second_client(storage) as other:
        for round_ in range(10):
            key = f"race/create-{round_}"
            results = await asyncio.gather(
                storage.write({key: StoreItem({"by": "a"}, None)}),
                other.write({key: StoreItem({"by": "b"}, None)}),
                return_exceptions=True,
            )
            assert sorted(type(r).__name__ for r in results) == ["ConflictError", "dict"]
            winner = "a" if isinstance(results[0], dict) else "b"
            assert (await storage.read([key]))[key].value == {"by": winner}


async def test_conditional_delete_loses_to_a_concurrent_write(storage: BlobStorage) -> None:
    etag = (await storage.write({"k/d": StoreItem({"v": 1}, None)}))["k/d"]
    async with second_client(storage) as other:
        await other.write({"k/d": StoreItem({"v": 2}, etag)})
        with pytest.raises(ConflictError):
            await storage.delete(["k/d"], if_match={"k/d": etag})
    assert (await storage.read(["k/d"]))["k/d"].value == {"v": 2}


# --- names at Azure's limits ---------------------------------------------------------------


async def stored_names(store: BlobStorage) -> list[str]:
    return [str(blob.name) async for blob in store.container.list_blobs()]


@pytest.mark.parametrize(
    "key, hashed",
    [
        ("k/" + "a" * (MAX_NAME_CHARS - 2), False),
        ("k/" + "A" * ((MAX_NAME_CHARS - 2) // 2), False),  # each upper-case letter is 2 chars
        ("k/" + "a" * (MAX_NAME_CHARS - 1), True),
        ("k/" + "é" * 200, True),  # 2 UTF-8 bytes, 6 name chars each
        ("/".join(["s"] * MAX_SEGMENTS), False),
        ("/".join(["s"] * (MAX_SEGMENTS + 1)), True),
    ],
    ids=["1024-chars", "1024-chars-upper", "1025-chars", "unicode-long", "254-segs", "255-segs"],
)
async def test_names_at_the_limits_round_trip_and_are_listed(
    storage: BlobStorage, key: str, hashed: bool
) -> None:
    name = blob_name(key)
    assert is_hashed(name) is hashed
    assert len(name) <= MAX_NAME_CHARS and name.count("/") < MAX_SEGMENTS
    etag = (await storage.write({key: StoreItem({"k": key}, None)}))[key]
    assert await stored_names(storage) == [name]
    assert (await storage.read([key]))[key] == StoreItem({"k": key}, etag)
    segment = key.split("/")[0] + "/"
    assert [k async for k in storage.list(segment)] == [key]
    assert [k async for k in storage.list(key)] == [key]
    assert [k async for k in storage.list(key + "x")] == []


async def test_long_keys_sharing_a_stem_get_their_own_blobs(storage: BlobStorage) -> None:
    stem = "k/" + "x" * 2000
    keys = [stem + suffix for suffix in ("", "a", "A", "/tail")]
    await storage.write({key: StoreItem({"i": i}, None) for i, key in enumerate(keys)})
    assert len(set(await stored_names(storage))) == len(keys)
    found = await storage.read(keys)
    assert {key: item.value["i"] for key, item in found.items()} == {
        k: i for i, k in enumerate(keys)
    }
    assert sorted([k async for k in storage.list(stem[:1500])]) == sorted(keys)
    assert [k async for k in storage.list(stem + "/")] == [stem + "/tail"]


async def test_foreign_blobs_are_not_listed_as_keys(storage: BlobStorage) -> None:
    await storage.write({"k/mine": StoreItem({})})
    for foreign in ("k/Upper", "k/a.txt", "k/" + "=#" + "0" * 64, "k/=41"):
        await storage.container.upload_blob(foreign, b"{}")
    assert [k async for k in storage.list("k/")] == ["k/mine"]


# --- the name mapping's properties -------------------------------------------------------

segments = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"), min_size=1
).filter(lambda s: s not in (".", ".."))
keys = st.lists(segments, min_size=1, max_size=6).map("/".join)
long_keys = st.tuples(keys, st.integers(300, 1200)).map(lambda t: t[0] + "/" + "Ä" * t[1])
any_keys = st.one_of(keys, long_keys)
NAME_ALPHABET = set(string.ascii_lowercase + string.digits + "-_~%:@/!=#")


@given(any_keys)
def test_names_are_lower_case_ascii_within_the_limits(key: str) -> None:
    name = blob_name(key)
    assert set(name) <= NAME_ALPHABET and name == name.lower()
    assert len(name) <= MAX_NAME_CHARS and name.count("/") < MAX_SEGMENTS
    assert not name.endswith((".", "/")) and "/./" not in f"/{name}/"


@given(any_keys)
def test_names_map_back_to_their_key(key: str) -> None:
    name = blob_name(key)
    if is_hashed(name):
        assert key_for_name(name) is None
    else:
        assert key_for_name(name) == key


@given(any_keys, any_keys)
def test_two_keys_never_share_a_name(a: str, b: str) -> None:
    assert (blob_name(a) == blob_name(b)) == (a == b)


@given(any_keys, st.data())
def test_every_prefix_of_a_key_lists_its_blob(key: str, data: st.DataObject) -> None:
    prefix = key[: data.draw(st.integers(0, len(key)))]
    assert blob_name(key).startswith(str(list_prefix(prefix)))


@given(keys, keys)
def test_a_name_prefix_means_a_key_prefix(key: str, prefix: str) -> None:
    """Where the listing prefix is the prefix's whole name (not cut to a stem, which lists a
    superset the storage filters by key), a name under it is a key under the prefix."""
    start = list_prefix(prefix)
    whole = start == blob_name(prefix)
    if whole and not is_hashed(blob_name(key)) and blob_name(key).startswith(str(start)):
        assert key.startswith(prefix)


def test_a_long_prefix_lists_a_stem_and_the_storage_filters_by_key() -> None:
    """A prefix too long for a whole name lists by its stem: a superset, never fewer."""
    prefix = "a/" + "b" * 1_000
    other = "a/" + "b" * 990 + "c"
    assert list_prefix(prefix) != blob_name(prefix)
    assert blob_name(other).startswith(str(list_prefix(prefix)))
    assert not other.startswith(prefix)


def test_prefix_that_no_key_can_have_lists_nothing() -> None:
    assert list_prefix("\ud800") is None


# --- a private Azurite, stopped and restarted by its PID ---------------------------------


@dataclass
class PrivateAzurite:
    port: int
    location: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return dev_connection_string(self.port)

    def start(self) -> None:
        main = Path(os.environ.get("AGENT_STATE_AZURITE_MAIN") or azurite_main_in_repo())
        if not main.is_file():
            server_missing(f"Azurite ({main} is not installed)")
        self.process = subprocess.Popen(
            ["node", str(main), "--blobHost", "127.0.0.1", "--blobPort", str(self.port)]
            + ["--location", str(self.location), "--disableTelemetry", "--skipApiVersionCheck"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        wait_for_line(self.process, b"successfully listens", deadline=30)

    def stop(self) -> None:
        """SIGTERM (Azurite saves its state) and wait; the port is free afterwards."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None

    def signal(self, number: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, number)


def azurite_main_in_repo() -> Path:
    return ROOT / ".test-npm/azurite/node_modules/azurite/dist/src/blob/main.js"


def wait_for_line(process: subprocess.Popen[bytes], marker: bytes, deadline: float) -> None:
    """Read the server's output until it prints `marker` (it is listening), within a deadline."""
    assert process.stdout is not None
    os.set_blocking(process.stdout.fileno(), False)
    seen = b""
    end = time.monotonic() + deadline
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while marker not in seen:
            left = end - time.monotonic()
            if left <= 0 or process.poll() is not None:
                process.kill()
                pytest.fail(f"private Azurite did not start: {seen.decode(errors='replace')}")
            if selector.select(timeout=left):
                seen += process.stdout.read() or b""


@pytest.fixture
def private_azurite(tmp_path: Path) -> Iterator[PrivateAzurite]:
    azurite_connection_string()  # the same switch as the shared server: required or skipped
    server = PrivateAzurite(free_port(), tmp_path / "azurite")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def elapsed(call: Awaitable[object]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        await call
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


async def test_stopped_server_fails_typed_within_bounds_and_the_same_object_recovers(
    private_azurite: PrivateAzurite,
) -> None:
    storage = BlobStorage("paused", connection_string=private_azurite.connection_string, timeout=1)
    try:
        etag = (await storage.write({"k/a": StoreItem({"v": 1}, None)}))["k/a"]
        private_azurite.signal(signal.SIGSTOP)
        try:
            took, error = await elapsed(storage.read(["k/a"]))
            assert isinstance(error, StorageUnavailableError) and took < 8, (took, error)
            took, error = await elapsed(storage.write({"k/b": StoreItem({}, None)}))
            assert isinstance(error, StorageUnavailableError) and took < 4, (took, error)
            took, error = await elapsed(storage.list("k/").__anext__())
            assert isinstance(error, StorageUnavailableError) and took < 8, (took, error)
        finally:
            private_azurite.signal(signal.SIGCONT)
        assert (await storage.read(["k/a"]))["k/a"] == StoreItem({"v": 1}, etag)
        assert await storage.write({"k/a": StoreItem({"v": 2}, etag)})
    finally:
        await storage.close()


async def test_server_gone_fails_fast_and_the_same_object_works_after_a_restart(
    private_azurite: PrivateAzurite,
) -> None:
    storage = BlobStorage("restart", connection_string=private_azurite.connection_string)
    try:
        etag = (await storage.write({"k/a": StoreItem({"v": 1}, None)}))["k/a"]
        private_azurite.stop()
        for call in (storage.read(["k/a"]), storage.write({"k/a": StoreItem({}, etag)})):
            took, error = await elapsed(call)
            assert isinstance(error, StorageUnavailableError) and took < 5, (took, error)
            assert not isinstance(error.__cause__, StorageConfigError)
        private_azurite.start()
        assert (await storage.read(["k/a"]))["k/a"] == StoreItem({"v": 1}, etag)
        etag = (await storage.write({"k/a": StoreItem({"v": 2}, etag)}))["k/a"]
        assert (await storage.read(["k/a"]))["k/a"] == StoreItem({"v": 2}, etag)
    finally:
        await storage.close()


# --- credentials and configuration -------------------------------------------------------


def shared_port() -> int:
    endpoint = azurite_connection_string().split("BlobEndpoint=")[1]
    return int(endpoint.split(":")[2].split("/")[0])


@pytest.mark.parametrize("create_container", [True, False])
async def test_wrong_account_key_is_a_config_error(
    storage: BlobStorage, create_container: bool
) -> None:
    wrong = BlobStorage(
        storage.container.container_name,
        connection_string=dev_connection_string(shared_port(), WRONG_KEY),
        create_container=create_container,
    )
    try:
        for call in (wrong.read(["k/a"]), wrong.write({"k/a": StoreItem({})})):
            with pytest.raises(StorageConfigError, match="refused the credentials"):
                await call
    finally:
        await wrong.close()
    assert await storage.read(["k/a"]) == {}


async def test_account_url_with_a_key_credential(storage: BlobStorage) -> None:
    account = BlobStorage(
        storage.container.container_name,
        account_url=f"http://127.0.0.1:{shared_port()}/{DEV_ACCOUNT}",
        credential={"account_name": DEV_ACCOUNT, "account_key": DEV_KEY},
    )
    try:
        etag = (await account.write({"k/a": StoreItem({"v": 1}, None)}))["k/a"]
    finally:
        await account.close()
    assert (await storage.read(["k/a"]))["k/a"] == StoreItem({"v": 1}, etag)


async def test_missing_container_is_a_config_error_not_a_missing_key() -> None:
    missing = BlobStorage(
        fresh_container(), connection_string=azurite_connection_string(), create_container=False
    )
    try:
        with pytest.raises(StorageConfigError, match="container does not exist"):
            await missing.read(["k/a"])
    finally:
        await missing.close()


async def test_container_is_created_on_first_use() -> None:
    name = fresh_container()
    store = BlobStorage(name, connection_string=azurite_connection_string())
    try:
        assert await store.read(["k/a"]) == {}
        assert (await store.container.get_container_properties()).name == name
    finally:
        await delete_container(store)
        await store.close()


async def test_from_url_takes_the_sdk_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    name = fresh_container()
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_connection_string())
    store = open_storage(f"azure-blob://{name}?max_concurrency=4&timeout=2")
    assert isinstance(store, BlobStorage) and store.max_concurrency == 4
    try:
        etag = (await store.write({"k/a": StoreItem({"v": 1}, None)}))["k/a"]
        assert (await store.read(["k/a"]))["k/a"] == StoreItem({"v": 1}, etag)
    finally:
        await delete_container(store)
        await store.close()


async def test_from_url_connection_string_env_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.setenv("MY_BLOB", azurite_connection_string())
    store = BlobStorage.from_url(
        f"azure-blob://{fresh_container()}?connection_string_env=MY_BLOB&create_container=false"
    )
    try:
        with pytest.raises(StorageConfigError, match="container does not exist"):
            await store.read(["k/a"])
    finally:
        await store.close()


@pytest.mark.parametrize(
    "url, message",
    [
        ("azure-blob://box1?colour=blue&sas=x", "unknown azure-blob:// option.*'colour', 'sas'"),
        ("azure-blob://box1?create_container=maybe", "create_container must be true or false"),
        ("azure-blob://box1?max_concurrency=0", "max_concurrency must be a positive whole number"),
        ("azure-blob://box1?max_concurrency=lots", "max_concurrency must be a positive whole"),
        ("azure-blob://box1?timeout=-1", "timeout must be a positive number"),
        ("azure-blob://box1?timeout=soon", "timeout must be a positive number"),
        ("azure-blob://Upper", "not a blob container name"),
        ("azure-blob://a--b", "not a blob container name"),
        ("azure-blob://ab", "not a blob container name"),
        ("azure-blob://", "azure-blob://CONTAINER"),
        ("azure-blob://box1/sub/path", "azure-blob://CONTAINER"),
        ("redis://box1", "azure-blob://CONTAINER"),
        ("azure-blob://box1?connection_string_env=NOT_SET_ANYWHERE", r"\$NOT_SET_ANYWHERE"),
    ],
)
def test_from_url_errors_name_the_problem(
    monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", dev_connection_string(1))
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(StorageConfigError, match=message):
        BlobStorage.from_url(url)


def test_from_url_without_a_connection_string_says_where_to_put_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(StorageConfigError, match=r"\$AZURE_STORAGE_CONNECTION_STRING"):
        BlobStorage.from_url("azure-blob://box1")


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "either connection_string or account_url"),
        ({"connection_string": "x", "account_url": "http://h"}, "either connection_string"),
        ({"connection_string": dev_connection_string(1), "credential": "k"}, "credential goes"),
        ({"connection_string": "no equals signs"}, "cannot configure"),
        ({"account_url": "http://h", "timeout": 0}, "timeout must be a positive"),
        ({"account_url": "http://h", "timeout": True}, "timeout must be a positive number"),
    ],
)
def test_constructor_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(StorageConfigError, match=message):
        BlobStorage("box1", **options)


# --- batch reads and TTL -----------------------------------------------------------------


class HookTransport(AioHttpTransport):  # type: ignore[misc]  # azure-core: an untyped lazy export
    """The SDK's own aiohttp transport, with a hook around each HTTP request (for tests)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.in_flight = self.most_in_flight = self.requests = 0
        self.after: Callable[[Any], Awaitable[None]] | None = None

    async def send(self, request: Any, **kwargs: Any) -> Any:
        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            response = await super().send(request, **kwargs)
        finally:
            self.in_flight -= 1
        if self.after is not None:
            await self.after(request)
        return response


@pytest.mark.parametrize("max_concurrency, expected", [(32, 12), (3, 3)])
async def test_batch_read_is_concurrent_gets_bounded_by_max_concurrency(
    storage: BlobStorage, max_concurrency: int, expected: int
) -> None:
    keys = [f"k/{i}" for i in range(12)]
    await storage.write({key: StoreItem({"i": i}) for i, key in enumerate(keys)})
    transport = HookTransport()
    async with second_client(
        storage, max_concurrency=max_concurrency, client_options={"transport": transport}
    ) as reader:
        found = await reader.read(keys)
    assert {key: item.value["i"] for key, item in found.items()} == dict(
        zip(keys, range(12), strict=True)
    )
    assert all(item.data == b'{"i":%d}' % item.value["i"] for item in found.values())
    assert transport.requests == len(keys) and transport.most_in_flight == expected


async def plant_expired(store: BlobStorage, key: str, value: bytes) -> None:
    """Store `key` as this backend would have, with an expiry a second in the past."""
    expires_at = time.time() - 1
    await store.container.upload_blob(
        blob_name(key),
        wrap(key, value, expires_at=expires_at),
        metadata={EXPIRES_METADATA: repr(expires_at)},
    )


async def blob_exists(store: BlobStorage, key: str) -> bool:
    try:
        await store.container.get_blob_client(blob_name(key)).get_blob_properties()
    except ResourceNotFoundError:
        return False
    return True


async def test_expired_blob_reads_as_missing_and_is_removed(storage: BlobStorage) -> None:
    await plant_expired(storage, "k/old", b'{"v":1}')
    await storage.write({"k/live": StoreItem({"v": 2})}, ttl=3600)
    assert list(await storage.read(["k/old", "k/live"])) == ["k/live"]
    assert not await blob_exists(storage, "k/old")


async def test_a_listing_removes_the_expired_blobs_it_passes(storage: BlobStorage) -> None:
    """The sweep of a store without native expiry (a session's documents expire together)."""
    await plant_expired(storage, "k/old", b'{"v":1}')
    await plant_expired(storage, "j/old", b'{"v":1}')
    await storage.write({"k/live": StoreItem({"v": 2})}, ttl=3600)
    assert sorted([k async for k in storage.list("k/")]) == ["k/live"]  # metadata says expired
    assert not await blob_exists(storage, "k/old")
    assert await blob_exists(storage, "j/old")  # not under the prefix listed: not met yet


async def test_lazy_removal_never_removes_a_fresh_write(storage: BlobStorage) -> None:
    """A writer replaces the expired blob between the reader's GET and its removal."""
    await plant_expired(storage, "k/ttl", b'{"v":1}')
    transport = HookTransport()
    fresh: dict[str, str] = {}

    async def rewrite_after_the_get(request: Any) -> None:
        if request.method == "GET" and not fresh:
            fresh.update(await storage.write({"k/ttl": StoreItem({"v": 2}, "*")}))

    transport.after = rewrite_after_the_get
    async with second_client(storage, client_options={"transport": transport}) as reader:
        assert await reader.read(["k/ttl"]) == {}
    assert (await storage.read(["k/ttl"]))["k/ttl"] == StoreItem({"v": 2}, fresh["k/ttl"])


async def test_create_over_an_expired_blob_succeeds_and_a_stale_create_does_not(
    storage: BlobStorage,
) -> None:
    await plant_expired(storage, "k/ttl", b'{"v":1}')
    etag = (await storage.write({"k/ttl": StoreItem({"v": 2}, None)}))["k/ttl"]
    assert (await storage.read(["k/ttl"]))["k/ttl"] == StoreItem({"v": 2}, etag)
    with pytest.raises(ConflictError):
        await storage.write({"k/ttl": StoreItem({"v": 3}, None)})


async def test_ttl_is_kept_in_the_envelope_and_in_metadata(storage: BlobStorage) -> None:
    before = time.time()
    await storage.write({"k/t": StoreItem({"v": 1})}, ttl=60)
    blob = storage.container.get_blob_client(blob_name("k/t"))
    properties = await blob.get_blob_properties()
    envelope = await (await blob.download_blob()).readall()
    expires_at = float(properties.metadata[EXPIRES_METADATA])
    assert before + 60 <= expires_at <= time.time() + 60
    assert b'"expires_at":' + repr(expires_at).encode() in envelope
    assert properties.content_settings.content_type == "application/json"
    assert b'"etag"' not in envelope  # the blob's ETag is the version


async def test_reads_are_retried_once_and_conditional_requests_never() -> None:
    """A resent conditional write whose first attempt landed would conflict with itself."""
    transport = HookTransport()
    nowhere = BlobStorage(
        "box1",
        connection_string=dev_connection_string(free_port()),  # nothing listens there
        create_container=False,
        client_options={"transport": transport},
    )
    calls: dict[str, tuple[Callable[[], Awaitable[object]], int]] = {
        "read": (lambda: nowhere.read(["k/a"]), 2),
        "create": (lambda: nowhere.write({"k/a": StoreItem({})}), 1),
        "if-match write": (lambda: nowhere.write({"k/a": StoreItem({}, '"0x1"')}), 1),
        "delete": (lambda: nowhere.delete(["k/a"]), 2),
        "if-match delete": (lambda: nowhere.delete(["k/a"], if_match={"k/a": '"0x1"'}), 1),
    }
    try:
        for name, (call, attempts) in calls.items():
            transport.requests = 0
            with pytest.raises(StorageUnavailableError, match="Cannot connect"):
                await call()
            assert transport.requests == attempts, name
    finally:
        await nowhere.close()
