"""RedisStorage on real servers: round trips, slot grouping, versions, TTL, outages, URLs.

Round trips are counted by wrapping the stream writes of every request (one write of a whole
request or pipeline to the socket, by redis-py or by the storage's direct call) and
cross-checked with the server's command stats.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.crc import key_slot
from redis.exceptions import RedisError

from agent_state import (
    Activity,
    AgentApplication,
    TurnContext,
    TurnState,
    app_key,
    conversation_key,
    open_storage,
    session_key,
    user_key,
    write_group,
)
from agent_state.backends import (
    ConflictError,
    FormatError,
    RedisStorage,
    StorageConfigError,
    StorageUnavailableError,
    StoreItem,
    wrap,
)
from agent_state.backends.redis.layout import KeyLayout
from agent_state.backends.redis.scripts import split_stored, stored_value
from tests.backends.conformance.harness_redis import (
    CLUSTER_URL,
    STANDALONE_URL,
    open_reachable,
    remove_namespace,
)
from tests.conftest import server_missing
from tests.net import free_port

# --- fixtures -------------------------------------------------------------------------------


async def fresh_namespace(cluster: bool) -> AsyncIterator[RedisStorage]:
    variable = CLUSTER_URL if cluster else STANDALONE_URL
    storage = await open_reachable(variable, cluster=cluster, namespace=uuid.uuid4().hex)
    yield storage
    await remove_namespace(storage)
    await storage.close()


@pytest.fixture
async def standalone() -> AsyncIterator[RedisStorage]:
    async for storage in fresh_namespace(cluster=False):
        yield storage


@pytest.fixture
async def cluster() -> AsyncIterator[RedisStorage]:
    async for storage in fresh_namespace(cluster=True):
        yield storage


@pytest.fixture(params=[False, True], ids=["standalone", "cluster"])
async def either(request: pytest.FixtureRequest) -> AsyncIterator[RedisStorage]:
    async for storage in fresh_namespace(cluster=request.param):
        yield storage


@dataclass
class RoundTrips:
    count: int = 0


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    """Counts requests written to any Redis socket (a pipeline is written as one request):
    redis-py writes each with `writelines`, the storage's direct call with `write`."""
    counter = RoundTrips()
    write, writelines = asyncio.StreamWriter.write, asyncio.StreamWriter.writelines

    def counting_write(self: asyncio.StreamWriter, data: bytes | bytearray | memoryview) -> None:
        counter.count += 1
        write(self, data)

    def counting_writelines(
        self: asyncio.StreamWriter, data: Iterable[bytes | bytearray | memoryview]
    ) -> None:
        counter.count += 1
        writelines(self, data)

    monkeypatch.setattr(asyncio.StreamWriter, "write", counting_write)
    monkeypatch.setattr(asyncio.StreamWriter, "writelines", counting_writelines)
    return counter


async def command_calls(storage: RedisStorage, command: str) -> dict[str, int]:
    """Server-side call count of `command` on each primary behind `storage` (INFO commandstats:
    the server's, so a test that reads it is marked `serial` and runs with no other test)."""
    if not storage.cluster:
        stats = await storage.client.info("commandstats")
        return {"server": stats.get(f"cmdstat_{command}", {}).get("calls", 0)}
    counts = {}
    for node in storage.client.get_primaries():
        async with Redis(host=node.host, port=int(node.port)) as raw:
            stats = await raw.info("commandstats")
        counts[node.name] = stats.get(f"cmdstat_{command}", {}).get("calls", 0)
    return counts


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {node: after[node] - before[node] for node in after if after[node] != before[node]}


def opened(url: str, **options: float | str) -> RedisStorage:
    """`open_storage(url)` for a Redis URL: a RedisStorage."""
    storage = open_storage(url, **options)
    assert isinstance(storage, RedisStorage)
    return storage


def msg(*, user: str, conversation: str) -> Activity:
    return Activity(channel_id="test", from_={"id": user}, conversation={"id": conversation})


def slot_of(storage: RedisStorage, key: str) -> int:
    return key_slot(storage.layout.redis_key(key).encode())


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.serial  # counts a shared server's INFO commandstats
async def test_batch_read_is_one_round_trip_whatever_its_size(
    standalone: RedisStorage, round_trips: RoundTrips
) -> None:
    keys = [f"c/users/u{i}" for i in range(500)]
    await standalone.write({key: StoreItem({"i": i}) for i, key in enumerate(keys)})
    await standalone.read(keys[:1])  # warm: the pooled connection exists
    commands = ("mget", "exists", "exec", "evalsha")
    before = {command: await command_calls(standalone, command) for command in commands}
    round_trips.count = 0
    found = await standalone.read(keys + ["c/users/missing"])
    assert round_trips.count == 1
    # one transaction of an MGET and an EXISTS, and no script (Lua would copy every value)
    for command in commands:
        calls = delta(before[command], await command_calls(standalone, command))
        assert calls == ({} if command == "evalsha" else {"server": 1}), command
    assert {key: item.value["i"] for key, item in found.items()} == {
        key: i for i, key in enumerate(keys)
    }


@pytest.mark.serial  # counts a shared server's INFO commandstats
async def test_batch_write_is_one_round_trip_and_one_script_call(
    standalone: RedisStorage, round_trips: RoundTrips
) -> None:
    changes = {f"c/users/u{i}": StoreItem({"i": i}, None) for i in range(200)}
    await standalone.write({"warm/up": StoreItem({})})
    before, round_trips.count = await command_calls(standalone, "evalsha"), 0
    etags = await standalone.write(changes)
    assert round_trips.count == 1
    assert delta(before, await command_calls(standalone, "evalsha")) == {"server": 1}
    assert set(etags) == set(changes)


@pytest.mark.serial  # counts a shared server's INFO commandstats
async def test_turn_keys_share_a_cluster_slot_and_save_in_one_round_trip(
    cluster: RedisStorage, round_trips: RoundTrips
) -> None:
    conversation = conversation_key("teams", "19:x@thread.v2")
    session = session_key("teams", "19:x@thread.v2", "29:1abc")
    assert slot_of(cluster, conversation) == slot_of(cluster, session)
    changes = {conversation: StoreItem({"topic": 1}, "*"), session: StoreItem({"step": 2}, "*")}
    await cluster.write(changes)  # warm: the node has a connection and the script
    before, round_trips.count = await command_calls(cluster, "evalsha"), 0
    await cluster.write(changes)
    assert round_trips.count == 1
    assert list(delta(before, await command_calls(cluster, "evalsha")).values()) == [1]


@pytest.mark.serial  # counts a shared server's INFO commandstats
async def test_cluster_batch_is_grouped_per_slot_one_round_trip_per_node(
    cluster: RedisStorage, round_trips: RoundTrips
) -> None:
    users = [user_key("slack", f"user-{i}") for i in range(40)]
    conversation = conversation_key("slack", "general")
    sessions = [session_key("slack", "general", f"user-{i}") for i in range(5)]
    keys = users + [conversation] + sessions
    slots = {slot_of(cluster, key) for key in keys}
    nodes = {cluster.client.get_node_from_key(cluster.layout.redis_key(key)).name for key in keys}
    assert len(nodes) == 3 and len(slots) == 41  # 40 users + one group for the conversation
    changes = {key: StoreItem({"key": key}, "*") for key in keys}
    await cluster.write(changes)  # warm: every node has a connection and the scripts
    await cluster.read(keys)
    await cluster.delete([f"absent/{i}" for i in range(30)])  # (a record may land on any node)
    before, round_trips.count = await command_calls(cluster, "evalsha"), 0
    etags = await cluster.write(changes)  # a commit across slots (backends/_commit.py):
    # read, place intents, replace them: a script per slot and a round trip per node each;
    # create the commit record and delete it: one of each
    assert round_trips.count == 3 * len(nodes) + 2
    assert (
        sum(delta(before, await command_calls(cluster, "evalsha")).values()) == 3 * len(slots) + 2
    )
    round_trips.count = 0
    stored = await cluster.read(keys)
    assert round_trips.count == len(nodes)
    assert {key: (item.value["key"], item.etag) for key, item in stored.items()} == {
        key: (key, etags[key]) for key in keys
    }


async def test_a_cluster_batch_across_slots_is_all_or_nothing(cluster: RedisStorage) -> None:
    assert cluster.atomic_batches is False
    stale = (await cluster.write({"c/users/a": StoreItem({"v": 1})}))["c/users/a"]
    await cluster.write({"c/users/a": StoreItem({"v": 2}, stale)})
    conversation, session = "c/conversations/k", "c/conversations/k/users/a"
    with pytest.raises(ConflictError) as info:
        await cluster.write(
            {
                "c/users/a": StoreItem({"v": 3}, stale),
                conversation: StoreItem({"v": 3}),
                session: StoreItem({"v": 3}),
            }
        )
    assert info.value.keys == ["c/users/a"]
    assert list(await cluster.read(["c/users/a", conversation, session])) == ["c/users/a"]


# --- atomicity ------------------------------------------------------------------------------


async def test_standalone_batch_is_all_or_nothing(standalone: RedisStorage) -> None:
    assert standalone.atomic_batches is True
    etag = (await standalone.write({"c/users/a": StoreItem({"v": 1})}))["c/users/a"]
    await standalone.write({"c/users/a": StoreItem({"v": 2}, etag)})
    with pytest.raises(ConflictError) as info:
        await standalone.write({"c/users/a": StoreItem({"v": 3}, etag), "c/users/b": StoreItem({})})
    assert info.value.keys == ["c/users/a"]
    assert list(await standalone.read(["c/users/a", "c/users/b"])) == ["c/users/a"]


async def test_refused_script_leaves_every_document_whole(private_server: PrivateServer) -> None:
    """An out-of-memory server refuses the whole script before it writes anything."""
    storage = RedisStorage.from_url(private_server.url, write_group=write_group)
    keys = {f"c/users/u{i}": StoreItem({"n": 1, "pad": "x" * 1000}) for i in range(20)}
    etags = await storage.write(keys)
    await storage.client.config_set("maxmemory", 1)
    try:
        with pytest.raises(StorageUnavailableError) as info:
            await storage.write(
                {key: StoreItem({"n": 2, "pad": "y" * 1000}, etags[key]) for key in keys}
            )
        assert "maxmemory" in str(info.value)
    finally:
        await storage.client.config_set("maxmemory", 0)
    stored = await storage.read(list(keys))
    assert {key: (item.value["n"], item.etag) for key, item in stored.items()} == {
        key: (1, etags[key]) for key in keys
    }
    await storage.close()


async def test_foreign_strings_are_never_taken_for_documents(standalone: RedisStorage) -> None:
    """A string agent-state did not write is an unknown format; only `"*"` replaces it."""
    key = "c/users/text"
    await standalone.client.set(standalone.layout.redis_key(key), b"someone else's text")
    with pytest.raises(FormatError):
        await standalone.read([key])
    with pytest.raises(ConflictError):
        await standalone.write({key: StoreItem({"v": 1}, None)})
    with pytest.raises(ConflictError):
        await standalone.delete([key], if_match={key: "1"})
    etag = (await standalone.write({key: StoreItem({"v": 1}, "*")}))[key]
    assert (await standalone.read([key]))[key] == StoreItem({"v": 1}, etag)


async def plant_other_types(storage: RedisStorage) -> dict[str, str]:
    """A hash, a list and a set at storage keys, as another application might leave them."""
    planted = {"c/users/hash": "hash", "c/users/list": "list", "c/users/set": "set"}
    redis_key = storage.layout.redis_key
    await storage.client.hset(redis_key("c/users/hash"), "f", "v")
    await storage.client.rpush(redis_key("c/users/list"), "item")
    await storage.client.sadd(redis_key("c/users/set"), "member")
    return planted


@pytest.mark.parametrize("expected", [None, "*", "1"], ids=["create", "always", "version"])
async def test_keys_of_another_type_are_a_format_error_on_read_and_write(
    either: RedisStorage, expected: str | None
) -> None:
    """MGET reports a hash or list as missing: the read script tells them apart by TYPE."""
    planted = await plant_other_types(either)
    good = "c/users/good"
    etag = (await either.write({good: StoreItem({"v": 1})}))[good]
    for key, kind in planted.items():
        with pytest.raises(FormatError, match=f"holds a Redis {kind}") as info:
            await either.read([good, key, "c/users/missing"])
        assert info.value.key == key
        with pytest.raises(FormatError, match=f"holds a Redis {kind}"):
            await either.write({key: StoreItem({"v": 2}, expected)})
        assert await either.client.type(either.layout.redis_key(key)) == kind.encode()
    assert (await either.read([good]))[good] == StoreItem({"v": 1}, etag)


async def test_a_batch_with_a_key_of_another_type_writes_nothing_on_a_server(
    standalone: RedisStorage,
) -> None:
    await plant_other_types(standalone)
    with pytest.raises(FormatError):
        await standalone.write({"c/users/new": StoreItem({}), "c/users/hash": StoreItem({}, "*")})
    assert await standalone.read(["c/users/new"]) == {}


async def test_a_cluster_batch_with_a_key_of_another_type_writes_nothing(
    cluster: RedisStorage,
) -> None:
    await plant_other_types(cluster)
    others = [f"c/users/u{i}" for i in range(10)]  # spread over the nodes
    with pytest.raises(FormatError):
        await cluster.write({"c/users/list": StoreItem({}), **{k: StoreItem({}) for k in others}})
    assert await cluster.read(others) == {}


async def test_a_key_of_another_type_is_removed_only_by_an_unconditional_delete(
    either: RedisStorage,
) -> None:
    await plant_other_types(either)
    with pytest.raises(ConflictError):
        await either.delete(["c/users/hash"], if_match={"c/users/hash": "1"})
    await either.delete(["c/users/hash"])
    assert await either.read(["c/users/hash"]) == {}


async def test_a_read_of_missing_keys_stays_one_round_trip_per_node(
    either: RedisStorage, round_trips: RoundTrips
) -> None:
    """The wrong-type check runs inside the read script: no extra round trip, found or not."""
    keys = [user_key("web", "u1"), conversation_key("web", "c1"), session_key("web", "c1", "u1")]
    keys.append(app_key("bot"))
    await either.write({keys[0]: StoreItem({"n": 1})})
    await either.read(keys)  # warm: connections and the read script
    round_trips.count = 0
    assert list(await either.read(keys)) == keys[:1]
    node_of = either.client.get_node_from_key if either.cluster else None
    nodes = {node_of(either.layout.redis_key(key)).name for key in keys} if node_of else {1}
    assert round_trips.count == len(nodes)


async def flush_scripts(storage: RedisStorage) -> None:
    """SCRIPT FLUSH on the server, or on every primary of a cluster (as after restarts)."""
    if not storage.cluster:
        await storage.client.script_flush()
        return
    for node in storage.client.get_primaries():
        async with Redis(host=node.host, port=int(node.port)) as raw:
            await raw.script_flush()


async def test_scripts_are_loaded_again_after_a_script_flush(either: RedisStorage) -> None:
    """A lone call and a pipeline (one call per slot group on a cluster) both reload them."""
    keys = [f"c/users/u{i}" for i in range(8)]
    etags = await either.write({key: StoreItem({"v": 1}) for key in keys})
    for batch in (keys[:1], keys):
        await flush_scripts(either)
        etags.update(await either.write({key: StoreItem({"v": 2}, etags[key]) for key in batch}))
        assert {key: item.value for key, item in (await either.read(batch)).items()} == {
            key: {"v": 2} for key in batch
        }
        await flush_scripts(either)
        await either.delete(batch, if_match={key: etags[key] for key in batch})
        assert await either.read(batch) == {}
        etags.update(await either.write({key: StoreItem({"v": 1}) for key in batch}))


# --- versions, TTL, layout ------------------------------------------------------------------


async def test_versions_grow_and_are_never_reused(either: RedisStorage) -> None:
    storage = either
    seen = [int((await storage.write({"c/users/v": StoreItem({"i": 0}, None)}))["c/users/v"])]
    for i in range(1, 20):
        etag = (await storage.write({"c/users/v": StoreItem({"i": i}, str(seen[-1]))}))["c/users/v"]
        seen.append(int(etag))
    await storage.delete(["c/users/v"])
    seen.append(int((await storage.write({"c/users/v": StoreItem({}, None)}))["c/users/v"]))
    await storage.write({"c/users/v": StoreItem({}, "*")}, ttl=0.05)
    await asyncio.sleep(0.1)
    assert await storage.read(["c/users/v"]) == {}
    seen.append(int((await storage.write({"c/users/v": StoreItem({}, None)}))["c/users/v"]))
    assert seen == sorted(seen) and len(set(seen)) == len(seen)


@pytest.mark.parametrize("planted", ["9007199254740993", "99999999999999999", "0000000000000042"])
async def test_versions_beyond_double_precision_still_grow(
    either: RedisStorage, planted: str
) -> None:
    """Lua numbers are doubles, exact only below 2**53: versions are counted as decimal text."""
    key = "c/users/big"
    envelope = wrap(key, orjson.dumps({"i": 0}))
    await either.client.set(either.layout.redis_key(key), stored_value(planted, envelope))
    seen = [planted]
    for i in range(1, 4):
        seen.append((await either.write({key: StoreItem({"i": i}, seen[-1])}))[key])
    assert [int(version) for version in seen] == sorted({int(version) for version in seen})
    assert all(not version.startswith("0") for version in seen[1:])
    with pytest.raises(ConflictError):
        await either.write({key: StoreItem({"i": 9}, seen[-2])})


async def test_a_new_client_continues_the_versions(standalone: RedisStorage) -> None:
    first = (await standalone.write({"c/users/r": StoreItem({"i": 1})}))["c/users/r"]
    other = RedisStorage.from_url(
        os.environ[STANDALONE_URL], namespace=standalone.layout.namespace, write_group=write_group
    )
    second = (await other.write({"c/users/r": StoreItem({"i": 2}, first)}))["c/users/r"]
    await other.close()
    assert int(second) > int(first)


async def test_ttl_is_kept_by_the_server_and_cleared_by_a_write_without_ttl(
    standalone: RedisStorage,
) -> None:
    redis_key = standalone.layout.redis_key("c/users/t")
    await standalone.write({"c/users/t": StoreItem({"v": 1})}, ttl=30)
    assert 29_000 < await standalone.client.pttl(redis_key) <= 30_000
    await standalone.write({"c/users/t": StoreItem({"v": 2}, "*")})
    assert await standalone.client.pttl(redis_key) == -1


async def test_documented_layout(standalone: RedisStorage) -> None:
    session = "teams/conversations/c1/users/ada"
    etag = (await standalone.write({session: StoreItem({"a": 1})}))[session]
    redis_key = f"{standalone.layout.namespace}:{{teams/conversations/c1}}/users/ada"
    assert standalone.layout.redis_key(session) == redis_key
    stored = await standalone.client.get(redis_key)
    assert isinstance(stored, bytes)
    split = split_stored(stored)
    assert split is not None
    version, envelope = split
    assert version == etag and orjson.loads(envelope)["data"] == {"a": 1}
    assert stored.startswith(f"{etag} {{".encode())


async def test_namespaces_are_isolated(standalone: RedisStorage) -> None:
    url = os.environ[STANDALONE_URL]
    base = standalone.layout.namespace
    assert base is not None
    nested = RedisStorage.from_url(url, namespace=f"{base}:inner", write_group=write_group)
    bare = RedisStorage.from_url(url, write_group=write_group)
    try:
        await standalone.write({"c/users/a": StoreItem({"who": "outer"})})
        await nested.write({"c/users/a": StoreItem({"who": "inner"}), "c/users/b": StoreItem({})})
        assert (await standalone.read(["c/users/a"]))["c/users/a"].value == {"who": "outer"}
        assert [key async for key in standalone.list()] == ["c/users/a"]
        assert sorted([key async for key in nested.list("c/")]) == ["c/users/a", "c/users/b"]
        assert not [key async for key in bare.list() if key.startswith(("c/", base))]
    finally:
        await remove_namespace(nested)
        await nested.close()
        await bare.close()


async def test_list_spans_every_cluster_node(cluster: RedisStorage) -> None:
    keys = [user_key("web", f"user-{i}") for i in range(60)]
    keys += [session_key("web", "room", f"user-{i}") for i in range(3)]
    await cluster.write({key: StoreItem({}) for key in keys})
    nodes = {cluster.client.get_node_from_key(cluster.layout.redis_key(key)).name for key in keys}
    assert len(nodes) == 3
    assert sorted([key async for key in cluster.list()]) == sorted(keys)
    assert sorted([key async for key in cluster.list("web/users/")]) == sorted(keys[:60])
    room = [key async for key in cluster.list("web/conversations/room/users/user-1")]
    assert room == ["web/conversations/room/users/user-1"]


@pytest.mark.parametrize("namespace", [None, "bot", "a:b", "*?[x]\\"])
def test_layout_round_trips_hostile_keys_and_keeps_turn_groups(namespace: str | None) -> None:
    layout = KeyLayout(write_group, namespace)
    keys = [
        "c/users/u",
        "a{b}/conversations/}x",
        "a{b}/conversations/}x/users/{",
        "w\\(/x)",
        "conversations/conversations/c/users/u",
        "app/n",
    ]
    for key in keys:
        assert layout.storage_key(layout.redis_key(key)) == key
        assert layout.storage_key(layout.redis_key(key).encode()) == key
    conversation, session = layout.redis_key(keys[1]), layout.redis_key(keys[2])
    assert key_slot(conversation.encode()) == key_slot(session.encode())
    assert layout.storage_key("other:{c/users/u}") is None
    assert layout.storage_key(layout.prefix + "{c/users/u") is None


# --- outages --------------------------------------------------------------------------------


@dataclass
class PrivateServer:
    """A redis-server subprocess of this test, stopped and restarted by its PID.

    As a cluster it is one master owning every slot; its nodes.conf survives a restart.
    """

    port: int
    directory: Path
    cluster_port: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def cluster(self) -> bool:
        return self.cluster_port is not None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" + ("?cluster=true" if self.cluster else "")

    def start(self) -> None:
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
        ]
        if self.cluster:
            # an explicit bus port: the default, port + 10000, may be above 65535
            command += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                str(self.cluster_port),
            ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with SyncRedis(port=self.port, socket_timeout=1) as raw:
            self._wait(lambda: raw.ping())
            if self.cluster:
                if b"cluster_slots_assigned:0" in raw.execute_command("CLUSTER", "INFO"):
                    raw.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                self._wait(lambda: b"cluster_state:ok" in raw.execute_command("CLUSTER", "INFO"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def _wait(self, ready: Callable[[], object]) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                if ready():
                    return
            except RedisError:
                pass
            assert self.process.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not get ready"
            time.sleep(0.02)  # polling a server process that is starting


def start_private_server(directory: Path, *, cluster: bool) -> PrivateServer:
    if shutil.which("redis-server") is None:
        server_missing("the redis-server binary")
    server = PrivateServer(free_port(), directory, free_port() if cluster else None)
    server.start()
    return server


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[PrivateServer]:
    server = start_private_server(tmp_path, cluster=False)
    yield server
    server.stop()


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[PrivateServer]:
    server = start_private_server(tmp_path, cluster=True)
    yield server
    server.stop()


async def test_stopped_server_fails_fast_and_the_same_storage_recovers(
    private_server: PrivateServer,
) -> None:
    storage = RedisStorage.from_url(private_server.url, timeout=2, write_group=write_group)
    await storage.write({"c/users/a": StoreItem({"v": 1})})
    private_server.stop()
    for attempt in (storage.read(["c/users/a"]), storage.write({"c/users/a": StoreItem({})})):
        start = time.monotonic()
        with pytest.raises(StorageUnavailableError) as info:
            await attempt
        assert time.monotonic() - start < 10
        assert info.value.__cause__ is not None
    with pytest.raises(StorageUnavailableError):
        [key async for key in storage.list()]
    private_server.start()  # same port, empty (no persistence)
    etag = (await storage.write({"c/users/a": StoreItem({"v": 2}, None)}))["c/users/a"]
    assert (await storage.read(["c/users/a"]))["c/users/a"] == StoreItem({"v": 2}, etag)
    await storage.close()


async def test_unresponsive_server_times_out_and_the_same_storage_recovers(
    private_server: PrivateServer,
) -> None:
    storage = RedisStorage.from_url(f"{private_server.url}?timeout=0.5", write_group=write_group)
    await storage.write({"c/users/a": StoreItem({"v": 1})})
    private_server.process.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            await storage.read(["c/users/a"])
        assert time.monotonic() - start < 5
    finally:
        private_server.process.send_signal(signal.SIGCONT)
    assert (await storage.read(["c/users/a"]))["c/users/a"].value == {"v": 1}
    await storage.close()


async def test_stopped_cluster_fails_fast_and_the_same_storage_recovers(
    private_cluster: PrivateServer,
) -> None:
    storage = RedisStorage.from_url(private_cluster.url, timeout=2, write_group=write_group)
    etag = (await storage.write({"c/users/a": StoreItem({"v": 1})}))["c/users/a"]
    private_cluster.stop()
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError):
        await storage.write({"c/users/a": StoreItem({"v": 2}, etag)})
    assert time.monotonic() - start < 10
    private_cluster.start()  # same port and nodes.conf: it owns every slot again, empty
    etag = (await storage.write({"c/users/a": StoreItem({"v": 3}, None)}))["c/users/a"]
    assert (await storage.read(["c/users/a"]))["c/users/a"] == StoreItem({"v": 3}, etag)
    assert [key async for key in storage.list()] == ["c/users/a"]
    await storage.close()


async def test_unreachable_cluster_is_unavailable_quickly() -> None:
    storage = RedisStorage.from_url(
        "redis://127.0.0.1:1/0?cluster=true&timeout=1", write_group=write_group
    )
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError):
        await storage.read(["c/users/a"])
    assert time.monotonic() - start < 10
    await storage.close()


# --- configuration --------------------------------------------------------------------------


async def test_open_storage_parses_redis_urls() -> None:
    storage = open_storage("redis://user:pw@127.0.0.1:6390/3?namespace=bot:1&timeout=2.5")
    assert isinstance(storage, RedisStorage) and isinstance(storage.client, Redis)
    assert storage.layout.namespace == "bot:1" and storage.atomic_batches
    kwargs = storage.client.connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (3, "user", "pw")
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 2.5
    await storage.close()

    storage = open_storage("redis://127.0.0.1:7000/0?cluster=true", namespace="n")
    assert isinstance(storage, RedisStorage) and isinstance(storage.client, RedisCluster)
    assert storage.cluster and storage.layout.namespace == "n" and not storage.atomic_batches
    await storage.close()


async def test_rediss_urls_configure_tls() -> None:
    storage = opened("rediss://example.invalid:6380/0?ssl_cert_reqs=none", timeout=1)
    pool = storage.client.connection_pool
    assert pool.connection_class is SSLConnection
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
    assert storage.layout.namespace is None
    await storage.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://h/0?cluster=maybe",
        "redis://h/0?timeout=-1",
        "redis://h/0?timeout=x",
        "redis://h/0?namespace={x}",
        "redis://h/0?namespace=",
        "http://h/0",
        "redis://h/abc",
        "redis://h/0/1",
        "redis://h/-1",
        "redis://h/1?cluster=true",
        "redis://h/abc?cluster=true",
        "redis://h/0?db=3",
        "redis://h/0?socket_timeout=1",
        "redis://h/0?pool_size=0",
        "redis://h/0?pool_size=2.5",
        "redis://h/0?pool_timeout=-1",
        "redis://h/0?protocol=5",
        "redis://h/0?timeout=1&timeout=2",
        "redis://h/0?ssl_cert_reqs=none",
        "rediss://h/0?ssl_cert_reqs=nope",
        "rediss://h/0?health_check_interval=soon",
    ],
)
def test_bad_redis_options_are_refused(url: str) -> None:
    with pytest.raises(StorageConfigError):
        RedisStorage.from_url(url, write_group=write_group)


def test_an_unknown_option_is_refused_by_name_with_the_known_ones() -> None:
    with pytest.raises(StorageConfigError, match="'namspace'") as info:
        open_storage("redis://h/0?namspace=bot")
    assert "known: client_name, cluster, health_check_interval, namespace," in str(info.value)
    assert "ssl_" not in str(info.value), "TLS options are listed for rediss:// only"
    with pytest.raises(StorageConfigError, match="'ssl_certfile' needs a rediss://"):
        open_storage("redis://h/0?ssl_certfile=/tmp/c.pem")
    with pytest.raises(StorageConfigError, match="database must be a number, got 'abc'"):
        open_storage("redis://h/abc")
    with pytest.raises(StorageConfigError, match="only database 0, got 2"):
        open_storage("redis://h/2", cluster=True)


@pytest.mark.parametrize("options", [{"pool_size": 0}, {"pool_timeout": 0}, {"timeout": "x"}])
def test_bad_keyword_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(StorageConfigError):
        RedisStorage.from_url("redis://h/0", **options, write_group=write_group)


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_client_options_reach_redis_py_and_unknown_ones_are_refused(cluster: bool) -> None:
    url = f"redis://h:1/0?cluster={str(cluster).lower()}"
    storage = RedisStorage.from_url(
        url, client_options={"socket_keepalive": False}, write_group=write_group
    )
    client = storage.client
    kwargs = (client.nodes_manager if cluster else client.connection_pool).connection_kwargs
    assert kwargs["socket_keepalive"] is False
    with pytest.raises(StorageConfigError, match="nonsense"):
        RedisStorage.from_url(url, client_options={"nonsense": 1}, write_group=write_group)
    with pytest.raises(StorageConfigError, match="max_connections"):
        RedisStorage.from_url(url, client_options={"max_connections": 9}, write_group=write_group)


async def test_pool_options_make_a_blocking_pool_and_size_the_cluster_nodes() -> None:
    storage = opened("redis://h:1/2?pool_size=7&pool_timeout=1.5&client_name=bot")
    pool = storage.client.connection_pool
    assert isinstance(pool, BlockingConnectionPool)
    assert (pool.max_connections, pool.timeout) == (7, 1.5)
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["client_name"]) == (2, "bot")
    await storage.close()
    default = opened("redis://h:1/0?timeout=3")
    assert (
        default.client.connection_pool.max_connections,
        default.client.connection_pool.timeout,
    ) == (
        50,
        3.0,
    ), "pool_timeout defaults to timeout"
    await default.close()
    cluster = opened("redis://h:1/0?cluster=true&pool_size=4")
    assert cluster.client.nodes_manager.connection_kwargs["max_connections"] == 4
    await cluster.close()


async def test_a_given_client_is_left_open(standalone: RedisStorage) -> None:
    client = Redis.from_url(os.environ[STANDALONE_URL])
    storage = RedisStorage(client, namespace=standalone.layout.namespace, write_group=write_group)
    await storage.write({"c/users/a": StoreItem({})})
    await storage.close()
    assert await client.ping()
    await client.aclose()


# --- connection pool ------------------------------------------------------------------------


def pooled_url(cluster: bool, **query: object) -> str:
    """The test server's URL with extra query options (the namespace is fresh)."""
    variable = CLUSTER_URL if cluster else STANDALONE_URL
    url = os.environ.get(variable)
    if not url:
        server_missing(f"Redis{' cluster' if cluster else ''} (${variable} is not set)")
    options = {"namespace": uuid.uuid4().hex, "cluster": str(cluster).lower(), **query}
    return f"{url}{'&' if '?' in url else '?'}" + "&".join(f"{k}={v}" for k, v in options.items())


async def connections_named(storage: RedisStorage, name: str) -> int:
    """How many connections on the server (all primaries) carry this client name."""
    client = storage.client
    if isinstance(client, RedisCluster):
        listed = [await client.client_list(target_nodes=node) for node in client.get_primaries()]
    else:
        listed = [await client.client_list()]
    return sum(1 for clients in listed for each in clients if each.get("name") == name)


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
async def test_turns_beyond_the_pool_size_wait_for_a_connection(cluster: bool) -> None:
    """150 concurrent turns on 5 connections (per node): all succeed, none opens a sixth."""
    name = f"pool-{uuid.uuid4().hex[:8]}"
    storage = opened(pooled_url(cluster, pool_size=5, client_name=name))
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        state["user:turns"] = state.get("user.turns", 0) + 1
        await ctx.send(str(state["user:turns"]))

    try:
        for expected in ("1", "2"):  # the second round reads what the first wrote
            replies = await asyncio.gather(
                *(app.process(msg(user=f"user-{i}", conversation=f"c{i}")) for i in range(150))
            )
            assert [[reply.text for reply in turn] for turn in replies] == [[expected]] * 150
        nodes = len(storage.client.get_primaries()) if cluster else 1
        discovery = 1 if cluster else 0  # a cluster client finds its nodes on its own connection
        assert 0 < await connections_named(storage, name) <= 5 * nodes + discovery
    finally:
        await remove_namespace(storage)
        await storage.close()


async def test_a_pool_busy_beyond_pool_timeout_is_unavailable() -> None:
    storage = opened(pooled_url(False, pool_size=1, pool_timeout=0.2))
    held = await storage.client.connection_pool.get_connection()
    try:
        start = time.monotonic()
        with pytest.raises(StorageUnavailableError, match="No connection available"):
            await storage.read(["c/users/a"])
        assert 0.2 <= time.monotonic() - start < 2
    finally:
        await storage.client.connection_pool.release(held)
    assert await storage.read(["c/users/a"]) == {}
    await storage.close()


async def test_a_cluster_call_waits_at_most_pool_timeout_for_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = opened(pooled_url(True, pool_size=1, pool_timeout=0.2))
    await storage.read(["c/users/a"])  # discover the nodes
    entered, release = asyncio.Event(), asyncio.Event()
    send = storage.client.execute_command

    async def held(*args: Any, **kwargs: Any) -> Any:  # keeps its connection until released
        entered.set()
        await release.wait()
        return await send(*args, **kwargs)

    monkeypatch.setattr(storage.client, "execute_command", held)
    first = asyncio.create_task(storage.read(["c/users/a"]))
    await entered.wait()
    monkeypatch.setattr(storage.client, "execute_command", send)
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="pool_timeout=0.2"):
        await storage.read(["c/users/b"])
    assert 0.2 <= time.monotonic() - start < 2
    release.set()
    assert await first == {}
    assert await storage.read(["c/users/b"]) == {}
    await storage.close()
