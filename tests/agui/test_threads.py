"""The thread service of AGUIEndpoint over real HTTP (httpx's ASGI transport) on memory, file
and Redis: a user's threads read without running the agent, listed newest first in pages,
renamed and deleted, each behind the owner check; a delete is all-or-nothing (one killed half
way leaves a thread gone to every route, which the next DELETE finishes; a run committing
meanwhile is refused); a long thread's last page read with the same storage reads as a
short one's; a reconnect after the run's events left the log is 410. The list comes from the
user's thread index, on every backend: a page of a user's many threads costs the reads of a
page of ten, paging visits each unchanged thread once, newest first, while others change;
concurrent runs of two threads both land in it; delete, forget and an expired session leave
no entry of the thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import BaseModel
from starlette.requests import Request

from agent_state import (
    SessionState,
    TurnIds,
    export_store,
    forget_user,
    import_store,
    open_storage,
    open_turn,
)
from agent_state.agui import AgentRun, AGUIEndpoint, RunLogLimits
from agent_state.agui._thread_index import LIST_PAGES
from agent_state.backends import MemoryStorage, Storage, StorageError, StoreItem
from tests.agui.server_support import VALIDATOR, assert_valid_streams, store_contents
from tests.stores import STORES

APP = "planner"
BACKENDS = ["memory", "file", "redis"]


class Plan(BaseModel):
    """The exposed state: a plan's steps, a run counter, and a server-only note."""

    steps: list[str] = []
    runs: int = 0
    note: str = ""


def header_user(request: Request) -> str | None:
    return request.headers.get("x-user")


async def planner(run: AgentRun[Plan]) -> None:
    """Adds a step per run, keeps a note on the server, answers."""
    run.state.runs += 1
    run.state.steps.append(f"step {run.state.runs}")
    run.state.note = "server only"
    await run.sync()
    await run.say(f"added step {run.state.runs}")


@pytest.fixture(scope="module", autouse=True)
def validator_process() -> Iterator[None]:
    yield
    VALIDATOR.close()


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


class Client:
    """Requests to one endpoint as a given user; every run's stream is kept for validation."""

    def __init__(self, app: AGUIEndpoint[Any]) -> None:
        self.app, self.streams = app, list[bytes]()

    async def request(
        self, method: str, path: str, *, user: str | None = "ada", body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:  # fmt: skip
        sent = dict(headers or {})
        if user is not None:
            sent["x-user"] = user
        content = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://agui.test") as client:
            return await client.request(method, path, content=content, headers=sent)

    async def run(self, thread: str, run_id: str, text: str = "plan it", *,
                  user: str = "ada", state: Any = None) -> httpx.Response:  # fmt: skip
        body = {"threadId": thread, "runId": run_id, "state": state or {}, "tools": [],
                "context": [], "forwardedProps": {},
                "messages": [{"id": f"u-{run_id}", "role": "user", "content": text}]}  # fmt: skip
        reply = await self.request("POST", "/", user=user, body=body,
                                   headers={"accept": "text/event-stream"})  # fmt: skip
        assert reply.status_code == 200, reply.text
        self.streams.append(reply.content)
        return reply


def endpoint(storage: Storage, agent: Callable[[AgentRun[Plan]], Awaitable[None]] = planner,
             **options: Any) -> AGUIEndpoint[Plan]:  # fmt: skip
    return AGUIEndpoint(agent, storage=storage, state=Plan, authenticate=header_user,
                        server_only=("note",), app_name=APP, **options)  # fmt: skip


def sse_ids(raw: bytes) -> list[int]:
    """The `id` field of every event of a raw SSE body, in order."""
    return [int(line[3:]) for line in raw.decode().split("\n") if line.startswith("id:")]


async def test_a_users_threads_are_read_listed_renamed_and_deleted_behind_the_owner_check(
    storage: Storage,
) -> None:
    client = Client(endpoint(storage))
    first = await client.run("t1", "r1", "ship   the\nrelease")
    assert first.headers["x-run-id"] == "r1"
    assert sse_ids(first.content) == list(range(1, len(sse_ids(first.content)) + 1))
    await client.run("t1", "r2", "next")
    await client.run("t2", "r3", "another plan")
    await client.run("t3", "r4", "bob's", user="bob")
    assert_valid_streams(client.streams)

    read = await client.request("GET", "/threads/t1")
    assert read.status_code == 200, read.text
    thread = read.json()
    assert thread["threadId"] == "t1" and thread["title"] == "ship the release"
    assert thread["state"] == {"steps": ["step 1", "step 2"], "runs": 2}  # no server-only note
    assert [m["id"] for m in thread["messages"]] == [
        "u-r1", thread["messages"][1]["id"], "u-r2", thread["messages"][3]["id"],
    ]  # fmt: skip
    assert thread["messages"][3] == {"id": thread["messages"][3]["id"], "role": "assistant",
                                     "content": "added step 2"}  # fmt: skip
    assert thread["before"] is None
    assert [(r["runId"], r["status"]) for r in thread["runs"]] == [
        ("r2", "completed"), ("r1", "completed"),
    ]  # fmt: skip
    assert all(r["createdAt"] and r["finishedAt"] for r in thread["runs"])

    listed = (await client.request("GET", "/threads")).json()
    assert [t["threadId"] for t in listed["threads"]] == ["t2", "t1"] and listed["next"] is None
    assert listed["threads"][1] == {key: thread[key] for key in
                                    ("threadId", "title", "createdAt", "updatedAt")}  # fmt: skip
    page = (await client.request("GET", "/threads?limit=1")).json()
    assert [t["threadId"] for t in page["threads"]] == ["t2"] and page["next"]
    rest = (await client.request("GET", f"/threads?limit=1&cursor={page['next']}")).json()
    assert [t["threadId"] for t in rest["threads"]] == ["t1"] and rest["next"] is None
    bobs = (await client.request("GET", "/threads", user="bob")).json()
    assert [t["threadId"] for t in bobs["threads"]] == ["t3"]

    for method in ("GET", "PATCH", "DELETE"):
        body = {"title": "mine now"} if method == "PATCH" else None
        assert (
            await client.request(method, "/threads/t1", user="bob", body=body)
        ).status_code == 403
        assert (
            await client.request(method, "/threads/t1", user=None, body=body)
        ).status_code == 401
        assert (await client.request(method, "/threads/nope", body=body)).status_code == 404
    assert (await client.request("GET", "/threads", user=None)).status_code == 401
    assert (await client.request("GET", "/threads?limit=101")).status_code == 422

    before = await store_contents(storage)
    for bad in ({"title": "x" * 201}, {"title": 3}, {"title": "a", "more": 1}, b'{"title": NaN}',
                b'{"title": "a", "title": "b"}', b"x" * 5_000):  # fmt: skip
        refused = await client.request("PATCH", "/threads/t1", body=bad)
        assert refused.status_code in (413, 422), refused.text
        assert set(refused.json()) == {"detail"}
    assert await store_contents(storage) == before
    renamed = await client.request("PATCH", "/threads/t1", body={"title": "Release plan"})
    assert renamed.status_code == 200
    assert renamed.json() == {**listed["threads"][1], "title": "Release plan"}
    assert (await client.request("GET", "/threads/t1")).json()["title"] == "Release plan"

    session = f"agui/conversations/t1/users/ada/agents/{APP}"
    assert any(key.startswith(session) for key in await store_contents(storage))
    assert (await client.request("DELETE", "/threads/t1")).status_code == 204
    assert (await client.request("GET", "/threads/t1")).status_code == 404
    assert (await client.request("GET", "/threads/t1/runs/r1/events")).status_code == 404
    left = await store_contents(storage)
    assert not [key for key in left if key.startswith(session) or "/t1/" in key
                or key.endswith("/sessions/t1")]  # fmt: skip
    assert [t["threadId"] for t in (await client.request("GET", "/threads")).json()["threads"]] == [
        "t2"
    ]
    assert (await client.request("GET", "/threads/t2")).json()["state"]["runs"] == 1
    again = await client.run("t1", "r5", "start over", user="bob")  # the id is free again
    assert again.status_code == 200
    assert (await client.request("GET", "/threads/t1", user="bob")).json()["state"]["runs"] == 1
    await forget_user(storage, "agui", "bob")  # the lifecycle's forget takes threads too
    assert (await client.request("GET", "/threads", user="bob")).json()["threads"] == []
    assert (await client.request("GET", "/threads/t1", user="bob")).status_code == 404


class Watch:
    """What a `watched` storage saw: its delete calls, and whether a delete's mark (an owner
    record with `deleting`) was written."""

    def __init__(self) -> None:
        self.deletes, self.marked = 0, asyncio.Event()


def watched(storage: Storage, *, fail_delete: int = 0) -> Watch:
    """Make `storage` an instance of a subclass of its own backend class that counts its
    delete calls, raises `StorageError` on call number `fail_delete` (0: never; the process
    dying there), and notes a delete's mark once written."""
    watch = Watch()

    class Watched(type(storage)):  # type: ignore[misc]
        async def delete(self, keys: Any, *, if_match: Mapping[str, str] | None = None) -> None:
            watch.deletes += 1
            if watch.deletes == fail_delete:
                raise StorageError("the deleting process died here")
            await super().delete(keys, if_match=if_match)

        async def write(self, changes: Mapping[str, StoreItem], **options: Any) -> dict[str, str]:
            etags: dict[str, str] = await super().write(changes, **options)
            if any("deleting" in item.value for item in changes.values()):
                watch.marked.set()
            return etags

    storage.__class__ = Watched
    return watch


async def thread_keys(storage: Storage, thread: str) -> list[str]:
    """Every stored key of the thread (its conversation's documents and the index entry)."""
    return [key async for key in storage.list("") if key.startswith(
        f"agui/conversations/{thread}/") or key.endswith(f"/sessions/{thread}")]  # fmt: skip


async def test_a_delete_killed_half_way_leaves_a_gone_thread_the_next_delete_finishes(
    storage: Storage,
) -> None:
    client = Client(endpoint(storage))
    await seed(storage, client, "t1", 130)  # its message ids alone fill more than a batch
    await client.run("t2", "r2")
    assert len(await thread_keys(storage, "t1")) > 100
    watch = watched(storage, fail_delete=2)
    died = await client.request("DELETE", "/threads/t1")
    assert died.status_code == 503 and watch.deletes == 2
    assert await thread_keys(storage, "t1")  # half way: some of it is left
    for method, path in (("GET", "/threads/t1"), ("PATCH", "/threads/t1"),
                         ("GET", "/threads/t1/runs/t1-r1/events")):  # fmt: skip
        body = {"title": "back?"} if method == "PATCH" else None
        gone = await client.request(method, path, body=body)
        assert gone.status_code == 404, (method, path, gone.text)
    for user in ("ada", "bob"):
        listed = (await client.request("GET", "/threads", user=user)).json()["threads"]
        assert "t1" not in [thread["threadId"] for thread in listed]
    for run_id in ("t1-r1", "fresh"):  # a resubmitted run, a new one: refused, nothing written
        message = {"id": f"u-{run_id}", "role": "user", "content": "plan it"}
        run: dict[str, Any] = {"threadId": "t1", "runId": run_id, "state": {}, "tools": [],
                               "context": [], "forwardedProps": {},
                               "messages": [message]}  # fmt: skip
        before = await store_contents(storage)
        refused = await client.request("POST", "/", body=run)
        assert refused.status_code == 409 and "being deleted" in refused.json()["detail"]
        assert await store_contents(storage) == before
    assert (await client.request("DELETE", "/threads/t1")).status_code == 204
    assert await thread_keys(storage, "t1") == []
    assert (await client.request("GET", "/threads/t2")).json()["state"]["runs"] == 1
    assert (await client.request("DELETE", "/threads/t1")).status_code == 404
    await client.run("t1", "again", user="bob")  # the id is free again
    assert (await client.request("GET", "/threads/t1", user="bob")).json()["state"]["runs"] == 1


@pytest.mark.parametrize("processes", [1, 2])
async def test_a_run_committing_while_its_thread_is_deleted_is_refused_and_leaves_nothing(
    storage: Storage, processes: int
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(run: AgentRun[Plan]) -> None:
        await planner(run)
        started.set()
        await release.wait()  # until the delete marked the thread

    running = Client(endpoint(storage, slow))
    deleting = running if processes == 1 else Client(endpoint(storage))
    watch = watched(storage)
    release.set()
    await deleting.run("t1", "r1")
    await running.run("t1", "r2")  # a first run of the slow agent, undisturbed
    release.clear()
    started.clear()
    run = asyncio.create_task(running.run("t1", "r3"))
    await started.wait()
    delete = asyncio.create_task(deleting.request("DELETE", "/threads/t1"))
    await asyncio.wait_for(watch.marked.wait(), 20)
    release.set()
    stream, deleted = await run, await delete
    assert deleted.status_code == 204, deleted.text
    assert b'"type":"RUN_ERROR"' in stream.content and b"RUN_FINISHED" not in stream.content
    assert await thread_keys(storage, "t1") == []
    for client in (running, deleting):
        assert (await client.request("GET", "/threads/t1")).status_code == 404
        assert (await client.request("GET", "/threads")).json()["threads"] == []


class CountingReads:
    """Counts the calls (and keys) of a real storage's `read` while `counting` is on."""

    def __init__(self, storage: Storage) -> None:
        self.calls, self.keys, self.counting = 0, 0, False
        read = storage.read

        async def counted(keys: Any) -> Any:
            keys = list(keys)
            if self.counting:
                self.calls, self.keys = self.calls + 1, self.keys + len(keys)
            return await read(keys)

        setattr(storage, "read", counted)  # noqa: B010 (instrumenting one instance)


async def seed(storage: Storage, client: Client, thread: str, messages: int) -> None:
    """A thread of `messages` messages: one run (two), then the rest appended in one turn."""
    await client.run(thread, f"{thread}-r1")
    async with open_turn(storage, TurnIds("agui", "ada", thread, APP)) as turn:
        await turn.history.append(*({"id": f"{thread}-m{i}", "role": "user", "content": f"m{i}"}
                                    for i in range(messages - 2)))  # fmt: skip


LONG = {"memory": 10_000, "redis": 10_000, "file": 1_000}
"""Messages of the long thread per backend: on files each message's index entry is a file
written durably (about 13 ms each here), so 1,000 messages (31 history pages) stand in."""


@pytest.mark.parametrize("backend", list(LONG))
async def test_the_last_page_of_a_10000_message_thread_takes_the_reads_of_a_10_message_one(
    backend: str, tmp_path: Path
) -> None:
    storage = open_storage(STORES[backend](str(tmp_path)))
    client, long = Client(endpoint(storage)), LONG[backend]
    await seed(storage, client, "short", 10)
    await seed(storage, client, "long", long)
    counter = CountingReads(storage)
    cost, keys, body = {}, {}, {}
    for thread, size in (("short", 10), ("long", long)):
        counter.calls = counter.keys = 0
        counter.counting = True
        reply = await client.request("GET", f"/threads/{thread}")
        counter.counting = False
        assert reply.status_code == 200
        body = reply.json()
        cost[thread], keys[thread] = counter.calls, counter.keys
        assert [m["id"] for m in body["messages"]][-1] == f"{thread}-m{size - 3}"
        assert len(body["messages"]) == min(size, 50)
        assert [r["status"] for r in body["runs"]] == ["completed"]
    assert cost["long"] == cost["short"] == 3, cost  # buckets and records, head, page and runs
    assert keys["long"] <= keys["short"] + 2, keys  # two history pages more, whatever the length
    older = (await client.request("GET", f"/threads/long?before={body['before']}")).json()
    assert [m["id"] for m in older["messages"]] == [
        f"long-m{i}" for i in range(long - 102, long - 52)
    ]
    for bad in ("bm9wZQ", "W10", "WyJub3BlIl0", "%00"):  # not JSON, [], ["nope"], not base64
        assert (await client.request("GET", f"/threads/long?before={bad}")).status_code == 422
    await storage.close()


async def test_a_reconnect_past_the_retained_events_is_410(storage: Storage) -> None:
    now = [1_000.0]

    async def noisy(run: AgentRun[Plan]) -> None:
        for number in range(300):
            run.state.runs = number
            await run.sync()

    limits = RunLogLimits(max_events=100, retention=60)
    client = Client(endpoint(storage, noisy, run_logs=limits, clock=lambda: now[0]))
    reply = await client.run("t1", "r1")
    ids = sse_ids(reply.content)
    assert ids == list(range(1, 304))  # the POST stream loses nothing: 299 deltas and 4 more
    path = "/threads/t1/runs/r1/events"
    assert (await client.request("GET", path, headers={"last-event-id": "10"})).status_code == 410
    assert (await client.request("GET", f"{path}?after=202")).status_code == 410  # 203 is gone
    tail = await client.request("GET", path, headers={"last-event-id": "203"})
    assert tail.status_code == 200 and tail.headers["content-type"].startswith("text/event-stream")
    assert sse_ids(tail.content) == list(range(204, 304))  # the 100 kept
    assert tail.content == reply.content[reply.content.index(b"id: 204\n") :]
    assert (await client.request("GET", path, user="bob")).status_code == 403
    assert (await client.request("GET", "/threads/t1/runs/r9/events")).status_code == 404
    now[0] += 61  # the run ended over a minute ago on the endpoint's clock
    gone = await client.request("GET", path, headers={"last-event-id": "300"})
    assert gone.status_code == 410 and "not kept" in gone.json()["detail"]


MANY = {"memory": 1_000, "redis": 150, "redis-cluster": 150, "file": 150, "blob": 150,
        "cosmos": 150}  # fmt: skip
"""Threads of the user with many, per backend: more than the head's 100 newest, so older
pages are read too (forgetting a thread on Redis scans the keyspace once)."""


async def restored_runs(storage: Storage, runs: list[tuple[str, str, str]], folder: Path) -> None:
    """What the runs `(user, thread, run id)` store, made by real runs on a memory store and
    restored into `storage` with export_store / import_store: the same documents, without a
    run's round trips per document (a run on Blob costs about a second on a loaded machine)."""
    memory = MemoryStorage()
    client = Client(endpoint(memory))
    for user, thread, run_id in runs:
        await client.run(thread, run_id, user=user)
    with open(folder / "runs.jsonl", "wb") as out:
        exported = await export_store(memory, out)
    restored = await import_store(storage, folder / "runs.jsonl")
    assert restored.written == exported.documents > len(runs)


class Calls:
    """What a `counted` storage was asked while `on`: read calls and keys, list calls."""

    def __init__(self) -> None:
        self.reads = self.keys = self.lists = 0
        self.on = False

    def reset(self) -> None:
        self.reads = self.keys = self.lists = 0
        self.on = True


def counted(storage: Storage) -> Calls:
    """Make `storage` an instance of a subclass of its own backend class that counts its
    read and list calls (the calls themselves go to the backend unchanged)."""
    calls = Calls()

    class Counted(type(storage)):  # type: ignore[misc]
        async def read(self, keys: Any) -> Any:
            keys = list(keys)
            if calls.on:
                calls.reads, calls.keys = calls.reads + 1, calls.keys + len(keys)
            return await super().read(keys)

        def list(self, prefix: str = "") -> Any:
            if calls.on:
                calls.lists += 1
            return super().list(prefix)

    storage.__class__ = Counted
    return calls


async def listing(client: Client, user: str, limit: int, cursor: str | None = None) -> Any:
    path = f"/threads?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
    reply = await client.request("GET", path, user=user)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def every_page(client: Client, user: str, limit: int) -> list[str]:
    """The thread ids of every page of the user's list, in the order given."""
    seen, cursor = [], None
    while True:
        page = await listing(client, user, limit, cursor)
        assert len(page["threads"]) <= limit
        seen += [thread["threadId"] for thread in page["threads"]]
        if page["next"] is None:
            return seen
        cursor = page["next"]


async def index_entries(storage: Storage, user: str) -> dict[str, list[float]]:
    """Every entry of the user's thread index in the store: thread id -> its times."""
    found: dict[str, list[float]] = {}
    prefix = f"agui/users/{user}/agui-thread"
    keys = [key async for key in storage.list(prefix)]
    for item in (await storage.read(keys)).values():
        entries = {**item.value.get("top", {}), **item.value.get("entries", {})}
        for thread, updated in entries.items():
            found.setdefault(thread, []).append(updated)
    return found


@pytest.mark.parametrize("backend", list(MANY))
async def test_a_page_of_many_threads_costs_what_a_page_of_ten_does_and_paging_is_exact(
    backend: str, tmp_path: Path
) -> None:
    storage = open_storage(STORES[backend](str(tmp_path)))
    client, many = Client(endpoint(storage)), MANY[backend]
    runs = [("few", f"few-{number:04d}", f"few-r{number}") for number in range(10)]
    runs += [("zed", f"zed-{number:04d}", f"zed-r{number}") for number in range(many)]
    await restored_runs(storage, runs, tmp_path)
    newest_first = [f"zed-{number:04d}" for number in reversed(range(many))]
    deep, walked = None, 0  # a cursor past most of zed's threads: older pages hold them
    while walked + 50 <= many - 40:
        page = await listing(client, "zed", 50, deep)
        deep, walked = page["next"], walked + len(page["threads"])
    calls = counted(storage)
    cost = {}
    assert deep is not None
    for name, user, cursor in (("few", "few", None), ("zed", "zed", None), ("deep", "zed", deep)):
        calls.reset()
        page = await listing(client, user, 20, cursor)
        calls.on = False
        assert len(page["threads"]) == min(20, 10 if user == "few" else many)
        cost[name] = (calls.reads, calls.keys, calls.lists)
    # the index head (the newest 100 threads are in it), the page's summaries and owners
    assert cost["few"] == (2, 1 + 2 * 10, 0) and cost["zed"] == (2, 1 + 2 * 20, 0), cost
    # past the head: its older pages too, a few in one read, whatever the number of threads
    assert cost["deep"][0] == 3 and cost["deep"][1] <= 1 + LIST_PAGES + 2 * 20, cost
    assert cost["deep"][2] == 0, cost

    assert await every_page(client, "zed", 7) == newest_first  # each once, newest first
    assert await every_page(client, "few", 100) == [f"few-{n:04d}" for n in reversed(range(10))]

    oldest, middle = newest_first[-1], newest_first[many // 2]
    await client.run(oldest, "again-1", user="zed")
    await client.run(middle, "again-2", user="zed")
    first = await listing(client, "zed", 3)
    assert [thread["threadId"] for thread in first["threads"]][:2] == [middle, oldest]
    read = (await client.request("GET", f"/threads/{middle}", user="zed")).json()
    assert first["threads"][0] == {key: read[key] for key in
                                   ("threadId", "title", "createdAt", "updatedAt")}  # fmt: skip

    # a listing under way while threads change: one already listed and one not yet listed
    # are updated between its pages; every other thread comes exactly once, in order
    order = [middle, oldest, *[t for t in newest_first if t not in (middle, oldest)]]
    seen: list[str] = []
    page = await listing(client, "zed", 11)
    seen += [thread["threadId"] for thread in page["threads"]]
    listed, unlisted = seen[5], order[-4]
    await client.run(listed, "again-3", user="zed")
    await client.run(unlisted, "again-4", user="zed")
    while page["next"]:
        page = await listing(client, "zed", 11, page["next"])
        seen += [thread["threadId"] for thread in page["threads"]]
    assert seen == [thread for thread in order if thread != unlisted]
    assert (await every_page(client, "zed", 50))[:2] == [unlisted, listed]

    renamed = await client.request("PATCH", f"/threads/{order[7]}", user="zed",
                                   body={"title": "Renamed"})  # fmt: skip
    assert renamed.status_code == 200
    titles = {t["threadId"]: t["title"] for t in (await listing(client, "zed", 20))["threads"]}
    assert titles[order[7]] == "Renamed"
    for gone in (order[7], order[-1]):  # one in the head, one on an older page
        assert (await client.request("DELETE", f"/threads/{gone}", user="zed")).status_code == 204
    assert not {order[7], order[-1]} & set(await every_page(client, "zed", 100))
    entries = await index_entries(storage, "zed")
    assert set(entries) == set(order) - {order[7], order[-1]}
    assert all(len(times) == 1 for times in entries.values())  # one entry per thread

    await forget_user(storage, "agui", "zed")
    assert await listing(client, "zed", 20) == {"threads": [], "next": None}
    everything = await store_contents(storage)
    assert not [key for key, value in everything.items()
                if "zed" in key or b"zed" in orjson.dumps(value)]  # fmt: skip
    assert await every_page(client, "few", 3) == [f"few-{n:04d}" for n in reversed(range(10))]
    await storage.close()


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("backend", list(STORES))
async def test_concurrent_runs_of_two_threads_of_one_user_both_land_in_the_index(
    backend: str, processes: int, tmp_path: Path
) -> None:
    storage = open_storage(STORES[backend](str(tmp_path)))
    started, both = [0], asyncio.Event()

    async def together(run: AgentRun[Plan]) -> None:
        await planner(run)
        started[0] += 1
        if started[0] >= 2:
            both.set()
        await both.wait()  # both runs commit at about the same time

    first = Client(endpoint(storage, together))
    second = first if processes == 1 else Client(endpoint(storage, together))
    for thread in ("a", "b", "c"):  # threads before: the new ones go to the head's front
        await Client(endpoint(storage)).run(thread, f"{thread}-0")
    await asyncio.gather(first.run("a", "a-1"), second.run("b", "b-1"))
    assert started[0] == 2  # the second commit replayed its index entry: no run ran again
    listed = (await listing(first, "ada", 10))["threads"]
    assert sorted(thread["threadId"] for thread in listed[:2]) == ["a", "b"]
    assert listed[2]["threadId"] == "c"
    for thread in listed:
        read = (await first.request("GET", f"/threads/{thread['threadId']}")).json()
        assert thread["updatedAt"] == read["updatedAt"]  # the entry of its last update
    assert {thread: len(times) for thread, times in (await index_entries(storage, "ada")).items()
            } == {"a": 1, "b": 1, "c": 1}  # fmt: skip
    await storage.close()


async def test_a_thread_whose_session_expired_leaves_the_list_and_the_index() -> None:
    now = [1_000_000.0]
    storage = MemoryStorage(clock=lambda: now[0])
    client = Client(endpoint(storage))
    for thread in ("old", "kept"):
        await client.run(thread, f"{thread}-r1")

    class Expiring(SessionState):
        ttl = 60

    async with open_turn(storage, TurnIds("agui", "ada", "old", APP), scopes=[Expiring]) as turn:
        turn["touched"] = True  # the session and all its documents now expire together
    now[0] += 3 * 60
    assert [t["threadId"] for t in (await listing(client, "ada", 10))["threads"]] == ["kept"]
    assert set(await index_entries(storage, "ada")) == {"kept"}  # cleaned by that listing
    await client.run("old", "old-r2")  # the id starts a new thread
    assert [t["threadId"] for t in (await listing(client, "ada", 10))["threads"]] == [
        "old", "kept",
    ]  # fmt: skip


async def test_bad_cursors_and_limits_are_refused() -> None:
    client = Client(endpoint(MemoryStorage()))
    await client.run("t1", "r1")
    for query in ("limit=0", "limit=101", "limit=x", "limit=-1", "cursor=bm9wZQ", "cursor=W10",
                  "cursor=WyJ4IiwxXQ", "cursor=W3RydWUsIngiXQ", "cursor=%00"):  # fmt: skip
        refused = await client.request("GET", f"/threads?{query}")
        assert refused.status_code == 422, (query, refused.text)
        assert set(refused.json()) == {"detail"}


async def test_a_delete_whose_mark_meets_another_threads_run_in_the_index_tries_again(
    storage: Storage,
) -> None:
    client = Client(endpoint(storage))
    for thread in ("t1", "t2"):
        await client.run(thread, f"{thread}-r1")
    raced = asyncio.Event()

    class Racing(type(storage)):  # type: ignore[misc]
        async def write(self, changes: Mapping[str, StoreItem], **options: Any) -> Any:
            if not raced.is_set() and any("deleting" in i.value for i in changes.values()):
                raced.set()  # another thread's run commits to the user's index first
                await client.run("t2", "t2-r2")
            return await super().write(changes, **options)

    storage.__class__ = Racing
    assert (await client.request("DELETE", "/threads/t1")).status_code == 204
    assert raced.is_set()
    assert [t["threadId"] for t in (await listing(client, "ada", 10))["threads"]] == ["t2"]
    entries = await index_entries(storage, "ada")
    assert list(entries) == ["t2"] and len(entries["t2"]) == 1
