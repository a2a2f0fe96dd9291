"""The AG-UI door holds: concurrent runs of one thread never fail, agents are kept apart, a
client adds only tool results it may, hostile numbers and oversized or slow requests are
refused with nothing written, runs record the history they were given, and a long thread
costs what is new. Every stream is checked with ag-ui-validate when the test ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel
from starlette.requests import Request

from agent_state import (
    RunStateError,
    TurnIds,
    accept_run,
    model_messages,
    next_turn,
    open_run,
    open_storage,
    open_turn,
    session_key,
)
from agent_state.agui import AgentRun, AGUIEndpoint, RequestLimits
from agent_state.backends import MemoryStorage, Storage
from tests.agui.server_support import VALIDATOR, Poster, Reply, assert_valid_streams, store_contents
from tests.stores import STORES

CHANNEL, THREAD, APP = "agui", "t1", "helper"
Agent = Callable[[AgentRun[Any]], Awaitable[None]]


class Board(BaseModel):
    """The exposed state: a counter and free-form notes."""

    count: int = 0
    notes: list[str] = []


def header_user(request: Request) -> str | None:
    return request.headers.get("x-user")


def user_message(ident: str, content: str = "hello") -> dict[str, Any]:
    return {"id": ident, "role": "user", "content": content}


def run_input(
    run_id: str, *, messages: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    """A RunAgentInput in wire form; `extra` members replace the defaults."""
    base: dict[str, Any] = {
        "threadId": THREAD,
        "runId": run_id,
        "state": {},
        "messages": [user_message(f"q-{run_id}")] if messages is None else messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    return {**base, **extra}


def ids(app: str | None = APP, user: str = "ada") -> TurnIds:
    return TurnIds(channel_id=CHANNEL, user_id=user, conversation_id=THREAD, app_name=app)


async def history(storage: Storage, app: str | None = APP) -> list[dict[str, Any]]:
    async with open_turn(storage, ids(app)) as turn:
        turn.discard()
        return await turn.history.first(await turn.history.count())


async def run_record(storage: Storage, run_id: str, app: str | None = APP) -> dict[str, Any]:
    key = f"{session_key(CHANNEL, THREAD, 'ada', agent=app)}/runs/{run_id}"
    value: dict[str, Any] = (await storage.read([key]))[key].value
    return value


async def counter(run: AgentRun[Board]) -> None:
    """Counts its runs and answers with the count."""
    run.state.count += 1
    await run.sync()
    await run.say(f"run {run.state.count}")


@pytest.fixture(scope="module", autouse=True)
def validator_process() -> Iterator[None]:
    yield
    VALIDATOR.close()


@pytest.fixture
def streams() -> Iterator[list[bytes]]:
    recorded: list[bytes] = []
    yield recorded
    assert_valid_streams(recorded)


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


def endpoint(agent: Agent, storage: Storage, **options: Any) -> AGUIEndpoint[Board]:
    options.setdefault("app_name", APP)
    return AGUIEndpoint(agent, storage=storage, state=Board, authenticate=header_user, **options)


def finished(reply: Reply) -> bool:
    types = reply.types
    return types[-1] == "RUN_FINISHED" and "RUN_ERROR" not in types


# --- 1. concurrent runs of one thread -----------------------------------------------------------


async def test_two_tabs_running_at_once_both_finish_in_turn(
    storage: Storage, streams: list[bytes]
) -> None:
    """A second concurrent run waits for the first to commit, then runs on what it left."""
    seen: list[int] = []

    async def agent(run: AgentRun[Board]) -> None:
        seen.append(len(run.messages))
        await asyncio.sleep(0)  # the model call: the other tab's run gets the loop meanwhile
        await counter(run)

    poster = Poster(endpoint(agent, storage), streams)
    first, second = await asyncio.gather(poster.run(run_input("a")), poster.run(run_input("b")))
    assert finished(first) and finished(second)
    assert sorted(seen) == [1, 3]  # the second run was given the first one's messages
    assert [m["role"] for m in await history(storage)] == ["user", "assistant"] * 2
    async with open_turn(storage, ids()) as turn:
        turn.discard()
        assert turn.session["count"] == 2


async def test_ten_runs_at_once_on_one_thread_all_finish(tmp_path: Path) -> None:
    storage = open_storage(STORES["file"](str(tmp_path)))
    poster = Poster(endpoint(counter, storage))
    replies = await asyncio.gather(*(poster.run(run_input(f"r{i}")) for i in range(10)))
    assert all(finished(reply) for reply in replies)
    assert len(await history(storage)) == 20


async def test_runs_of_two_processes_on_one_thread_run_again_instead_of_failing(
    storage: Storage, streams: list[bytes]
) -> None:
    """Two endpoints (two processes' worth of queues) on one store: both agents start before
    either commits; the commit that meets the other's runs its agent again on the newer state."""
    started: list[str] = []
    both = asyncio.Event()

    async def agent(run: AgentRun[Board]) -> None:
        started.append(run.input.run_id)
        if len(started) >= 2:
            both.set()
        await both.wait()
        await counter(run)

    one, two = Poster(endpoint(agent, storage), streams), Poster(endpoint(agent, storage), streams)
    first, second = await asyncio.gather(one.run(run_input("a")), two.run(run_input("b")))
    assert finished(first) and finished(second)
    assert len(started) == 3  # one of them ran again
    again = first if started.count("a") == 2 else second
    assert again.types.count("STATE_SNAPSHOT") == 2  # the re-run resyncs its client
    async with open_turn(storage, ids()) as turn:
        turn.discard()
        assert turn.session["count"] == 2
    assert len(await history(storage)) == 4


# --- 4. the history a run was given -------------------------------------------------------------


async def test_an_agui_run_records_the_history_it_was_given(streams: list[bytes]) -> None:
    storage = MemoryStorage()

    async def thinker(run: AgentRun[Board]) -> None:
        await run.history.append({"id": f"why-{run.input.run_id}", "role": "reasoning",
                                  "content": "because"})  # fmt: skip
        await counter(run)

    given: list[list[str]] = []

    async def reader(run: AgentRun[Board]) -> None:
        given.append([m["role"] for m in run.messages])

    await Poster(endpoint(thinker, storage), streams).run(run_input("r1"))
    record = await run_record(storage, "r1")
    assert record["selection"]["kind"] == "thread" and record["selection"]["through"] == 1
    later = await accept_run(storage, ids(), "next", {}, history=next_turn("r1"))
    async with open_run(storage, later) as turn:
        roles = [m["role"] for m in await model_messages(turn, later)]
    assert roles == ["user", "reasoning", "assistant"]
    plain = Poster(endpoint(reader, storage, drop_reasoning=True), streams)
    await plain.run(run_input("r2", messages=[user_message("q-r1"), user_message("q-r2")]))
    assert given == [["user", "assistant", "user"]]  # reasoning left out of what it was given
    dropped = await accept_run(storage, ids(), "after", {}, history=next_turn("r2"))
    async with open_run(storage, dropped) as turn:
        assert "reasoning" not in [m["role"] for m in await model_messages(turn, dropped)]


# --- 5. agents kept apart -----------------------------------------------------------------------


async def test_two_agents_on_one_store_never_share_a_thread(
    storage: Storage, streams: list[bytes]
) -> None:
    plans: list[Any] = []

    async def planner(run: AgentRun[Board]) -> None:
        run.turn.user["plan"] = "pro"  # the user bucket: shared by the channel's agents
        await counter(run)

    async def reader(run: AgentRun[Board]) -> None:
        plans.append(run.turn.user.get("plan"))
        await counter(run)

    poster_a = Poster(endpoint(planner, storage, app_name="a"), streams)
    poster_b = Poster(endpoint(reader, storage, app_name="b"), streams)
    await poster_a.run(run_input("r1"))
    await poster_a.run(run_input("r2", messages=[]))
    reply = await poster_b.run(run_input("r1", messages=[user_message("b-q")]))
    assert reply.of_type("STATE_SNAPSHOT")[0]["snapshot"] == {"count": 0, "notes": []}
    (snapshot,) = reply.of_type("MESSAGES_SNAPSHOT")
    assert [m["id"] for m in snapshot["messages"]][0] == "b-q"
    assert len(snapshot["messages"]) == 2
    assert len(await history(storage, "a")) == 3 and len(await history(storage, "b")) == 2
    assert plans == ["pro"]
    other = await Poster(endpoint(counter, storage, app_name="c"), streams).send(
        run_input("r1"), user="grace"
    )
    assert other.status == 200  # thread t1 of agent c is grace's own
    with pytest.raises(RunStateError, match="not a completed run of this session"):
        await accept_run(storage, ids("b"), "inherit", {}, history=next_turn("r2"))


# --- 6. tool results a client may add -----------------------------------------------------------

ASK = {"name": "ask_user", "description": "asks the user", "parameters": {}}


async def test_a_client_answers_only_an_unanswered_call_of_its_own_tool_once(
    storage: Storage, streams: list[bytes]
) -> None:
    calls: dict[str, str] = {}

    async def agent(run: AgentRun[Board]) -> None:
        if run.input.run_id == "r1":
            calls["client"] = await run.call_tool("ask_user", {"q": "go?"})
            calls["server"] = await run.call_tool("search", {"q": "x"})
            await run.tool_result(calls["server"], "found")
        else:
            await run.say("ok")

    poster = Poster(endpoint(agent, storage), streams)
    await poster.run(run_input("r1", tools=[ASK]))
    held = await history(storage)

    def answer(ident: str, call: str) -> dict[str, Any]:
        return {"id": ident, "role": "tool", "toolCallId": call, "content": "planted"}

    before = await store_contents(storage)
    for planted in (
        [answer("t1", "never-made")],  # a call that never happened
        [answer("t2", calls["server"])],  # a second result for a call the server ran
        [answer("t3", calls["client"]), answer("t4", calls["client"])],  # answered twice
    ):
        reply = await poster.send(run_input("rx", messages=[*held, *planted], tools=[ASK]))
        assert reply.status == 422 and "answers no unanswered call" in reply.detail
    assert await store_contents(storage) == before
    ok = await poster.run(run_input("r2", messages=[*held, answer("t5", calls["client"])]))
    assert finished(ok)
    again = await poster.send(run_input("r3", messages=[*held, answer("t6", calls["client"])]))
    assert again.status == 422  # the call is answered: once only


# --- 7. numbers and names JSON does not settle --------------------------------------------------

HOSTILE = {
    "integer beyond 64 bits in forwardedProps": b'"forwardedProps": {"n": 18446744073709551616}',
    "negative integer beyond 64 bits in state": b'"state": {"count": -9223372036854775809}',
    "NaN": b'"forwardedProps": {"x": NaN}',
    "Infinity": b'"state": {"count": Infinity}',
    "a float that overflows": b'"forwardedProps": {"x": 1e400}',
    "duplicate member": b'"state": {"count": 1, "count": 2}',
}


@pytest.mark.parametrize("member", HOSTILE.values(), ids=list(HOSTILE))
async def test_hostile_json_is_a_422_before_anything_is_written(
    member: bytes, storage: Storage, streams: list[bytes]
) -> None:
    poster = Poster(endpoint(counter, storage), streams)
    await poster.run(run_input("r1"))
    before = await store_contents(storage)
    body = (
        b'{"threadId": "t1", "runId": "r2", "messages": [], "tools": [], "context": [], '
        + (b'"state": {}, ' if b'"state"' not in member else b"")
        + (b'"forwardedProps": {}, ' if b'"forwardedProps"' not in member else b"")
        + member
        + b"}"
    )
    reply = await poster.send(body)
    assert reply.status == 422, reply.raw
    assert await store_contents(storage) == before


# --- 8. bounded work and time per request -------------------------------------------------------

SMALL = RequestLimits(max_messages=50, max_new_messages=5, max_state_bytes=2_000,
                      max_state_depth=6, body_timeout=0.2)  # fmt: skip


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


OVER = {
    "messages per request": run_input("rx", messages=[user_message(f"m{i}") for i in range(51)]),
    "new messages per request": run_input("rx", messages=[user_message(f"n{i}") for i in range(6)]),
    "state size": run_input("rx", state={"notes": ["x" * 100] * 30}),
    "state depth": run_input("rx", state={"notes": nested(10)}),
}


@pytest.mark.parametrize("body", OVER.values(), ids=list(OVER))
async def test_work_per_request_is_bounded_and_a_refusal_writes_nothing(
    body: dict[str, Any], storage: Storage, streams: list[bytes]
) -> None:
    poster = Poster(endpoint(counter, storage, limits=SMALL), streams)
    await poster.run(run_input("r1"))
    before = await store_contents(storage)
    reply = await poster.send(body)
    assert reply.status == 413 and ("at most" in reply.detail or "deeper" in reply.detail)
    assert await store_contents(storage) == before


async def test_a_body_that_trickles_in_too_slowly_is_a_408(streams: list[bytes]) -> None:
    storage = MemoryStorage()
    poster = Poster(endpoint(counter, storage, limits=SMALL), streams)
    await poster.run(run_input("r1"))
    before = await store_contents(storage)
    stalled = asyncio.Event()

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"threadId": "t1", '
        await stalled.wait()  # the client never sends the rest
        yield b"}"

    reply = await asyncio.wait_for(poster.send(trickle()), 10)  # let go long before
    assert reply.status == 408 and "seconds" in reply.detail
    assert await store_contents(storage) == before


def test_the_default_limits_are_safe() -> None:
    limits = RequestLimits()
    assert 0 < limits.body_timeout <= 60 and limits.max_messages <= 10_000
    assert limits.max_new_messages <= 1_000 and limits.max_state_depth <= 64
    assert limits.max_state_bytes <= limits.max_body_bytes <= 16_000_000


# --- 9. long threads cost what is new -----------------------------------------------------------


async def test_a_run_record_keeps_the_held_messages_as_one_reference(storage: Storage) -> None:
    poster = Poster(endpoint(counter, storage))
    sent: list[dict[str, Any]] = []
    sizes: list[int] = []
    for number in range(1, 13):
        sent = [*await history(storage), user_message(f"q{number}", "x" * 1_000)]
        await poster.run(run_input(f"r{number}", messages=sent))
        record = await run_record(storage, f"r{number}")
        sizes.append(len(orjson.dumps(record)))
    kept = record["request"]["messages"]
    assert kept["through"] == sent[-2]["id"] and [m["id"] for m in kept["new"]] == ["q12"]
    assert sizes[-1] <= 1.2 * sizes[2]  # not a copy, nor a list growing with the thread


async def test_sixty_runs_with_20_kb_messages_complete_with_default_settings() -> None:
    storage = MemoryStorage()
    poster = Poster(endpoint(counter, storage))
    for number in range(1, 61):
        sent = [*await history(storage), user_message(f"q{number}", "x" * 20_000)]
        reply = await poster.send(run_input(f"r{number}", messages=sent))
        assert reply.status == 200 and finished(reply), (number, reply.raw[:200])
    assert len(await history(storage)) == 120
