"""The AG-UI endpoint: an ASGI app that takes a POSTed `RunAgentInput` and streams the run,
and serves the user's threads (`/threads...`, `_threads.py`) and reconnects to a run's events.

A run executes in a task of its own, its events numbered into the run's log (`_run_log.py`),
which the POST's stream follows (each SSE frame with its `id`) and a reconnect follows from
`Last-Event-ID`; the client going away cancels the run only with `cancel_on_disconnect`.

Everything that can refuse a run is checked before the stream starts, in the turn that
records the run as accepted, so a refusal is an HTTP status with nothing written: 401 (no
user), 408 (the body took too long), 413 (`RequestLimits` exceeded), 422 (`RunInputError`,
strict JSON included), 403 (`ThreadOwnerError`), 409 (the run id with another input, or
`ThreadDeletingError`: the thread's delete has begun), 503 (the store is unreachable). The
run itself is one turn of the thread's session (`execute_run`): its state, history appends
and completion commit together after the agent returns, then MESSAGES_SNAPSHOT and
RUN_FINISHED follow; a failure is RUN_ERROR, preceded by a STATE_SNAPSHOT of the stored
state once the run had sent state. The same run id with the same input replays the
recorded run.

Runs of one thread are coordinated like bot turns: in one process they take turns (a
second run waits for the first to commit, then runs on the state and history it left);
across processes a run whose commit meets another's runs again on the newer state, its
stream getting a fresh STATE_SNAPSHOT (the final MESSAGES_SNAPSHOT drops what a discarded
attempt said). So concurrent runs never fail for contention.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic
from urllib.parse import unquote

import orjson
from ag_ui.core import (
    BaseEvent,
    Message,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
)
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .. import (
    HistoryError,
    MissingIdError,
    Run,
    RunConflictError,
    StateConflictError,
    StateValidationError,
    TurnIds,
    TurnQueues,
    TurnState,
    accept_run,
    execute_run,
    model_messages,
    open_turn,
    thread,
)
from ..backends import InvalidKeyError, Storage, StorageError
from ._agent_run import AgentRun
from ._exposed import ExposedState, M, validation_summary
from ._request import RequestLimits, check_bounds, parse_body, receive_body
from ._run_log import RunLog, RunLogGoneError, RunLogLimits, RunLogs
from ._server_errors import (
    RunInputError,
    ThreadDeletingError,
    ThreadNotFoundError,
    ThreadOwnerError,
)
from ._thread_input import FORMAT, ThreadInput, read_input
from ._threads import MAX_THREADS_PAGE, ThreadService, check_title

log = logging.getLogger("agent_state.agui.server")

Authenticate = Callable[[Request], "Awaitable[str | None] | str | None"]
"""Who the request is from (a user id), from the application's authentication; None: 401."""
Agent = Callable[[AgentRun[Any]], Awaitable[None]]
"""The agent: `async def agent(run)`, changing `run.state` and speaking through `run`."""

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_RENAME_LIMITS = RequestLimits(max_body_bytes=4_096, body_timeout=10.0)


class AGUIEndpoint(Generic[M]):
    """An ASGI app serving one agent: mount it (Starlette `Mount`, FastAPI `app.mount`) and
    POST AG-UI `RunAgentInput` to it."""

    def __init__(
        self,
        agent: Agent,
        *,
        storage: Storage,
        state: type[M],
        authenticate: Authenticate,
        server_only: Iterable[str] = (),
        channel: str = "agui",
        app_name: str | None = None,
        namespace: str | None = None,
        limits: RequestLimits = RequestLimits(),  # noqa: B008 (frozen)
        drop_reasoning: bool = False,
        clock: Callable[[], float] = time.time,
        lease: float | None = None,
        run_logs: RunLogLimits = RunLogLimits(),  # noqa: B008 (frozen)
        cancel_on_disconnect: bool = False,
    ) -> None:
        """`state`: the pydantic model of the exposed thread state (fields named in
        `server_only` are stored but never sent or accepted). `authenticate(request)` names
        the user; the request body never does. `app_name` names the agent: its threads,
        runs and history are its own. `drop_reasoning` leaves reasoning messages out of the
        history the agent is given (`without_prior_reasoning`); `clock` and `lease` (None:
        the default) time the runs' leases (see `accept_run`). `run_logs` bounds what is kept
        of each run's events for reconnecting clients; a run goes on when its client goes
        away unless `cancel_on_disconnect`."""
        self.agent, self.storage, self.exposed = agent, storage, ExposedState(state, server_only)
        self.authenticate, self.limits = authenticate, limits
        self.channel, self.app_name, self.namespace = channel, app_name, namespace
        self.history = thread().without_prior_reasoning() if drop_reasoning else thread()
        self._timing: dict[str, Any] = {"clock": clock}
        if lease is not None:
            self._timing["lease"] = lease
        self._queues = TurnQueues()
        self.clock, self.cancel_on_disconnect = clock, cancel_on_disconnect
        self.threads = ThreadService(
            self.storage, self.exposed, self._queues,
            channel=channel, app_name=app_name, namespace=namespace, clock=clock,
        )  # fmt: skip
        self._logs = RunLogs(run_logs, clock)
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # served on its own: nothing to start or stop
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            raise RuntimeError("AGUIEndpoint serves HTTP only")
        request = Request(scope, receive)
        response = await self.respond(request)
        await response(scope, receive, send)

    async def respond(self, request: Request) -> Response:
        """The response to one request: a run's event stream, a thread service answer, or
        an error status (see docs/agui.md for the routes)."""
        route, allowed = _route(request.scope)
        if route is None:
            return (
                _refusal(404, "no such route")
                if allowed is None
                else _refusal(405, f"use {allowed} here")
            )
        user = self.authenticate(request)
        user = await user if inspect.isawaitable(user) else user
        if not user:
            return _refusal(401, "not authenticated")
        try:
            return await self._serve(request, route, user)
        except (RunInputError, ThreadOwnerError, ThreadNotFoundError, ThreadDeletingError,
                RunLogGoneError) as exc:  # fmt: skip
            return _refusal(exc.status_code, str(exc))
        except ValidationError as exc:
            return _refusal(422, f"not a valid RunAgentInput: {validation_summary(exc)}")
        except (InvalidKeyError, MissingIdError, HistoryError) as exc:
            return _refusal(422, f"not a valid RunAgentInput: {exc}")
        except RunConflictError as exc:
            return _refusal(409, str(exc))
        except StateConflictError:
            return _refusal(409, "the thread changed meanwhile: try again")
        except StorageError as exc:
            log.warning("request refused, the store failed: %s", exc)
            return _refusal(503, "the state store is unavailable")
        except StateValidationError as exc:  # stored data the model refuses: not the client's
            log.error("request refused, the stored thread state is invalid: %s", exc)
            return _refusal(500, f"the stored thread state is invalid: {exc}")
        except ClientDisconnect:
            return _refusal(400, "the client went away")

    async def _serve(self, request: Request, route: tuple[str, ...], user: str) -> Response:
        """One authenticated request on its route (what raises is refused by `respond`)."""
        method, query = request.method, request.query_params
        if not route:
            return await self._post_run(request, user)
        if len(route) == 1:
            limit = _integer(query.get("limit", "20"), "limit")
            if not 1 <= limit <= MAX_THREADS_PAGE:
                raise RunInputError(f"limit is 1 to {MAX_THREADS_PAGE}")
            return _json(await self.threads.list(user, limit, query.get("cursor")))
        thread_id = route[1]
        if len(route) == 5:
            after = request.headers.get("last-event-id", query.get("after", "0"))
            return await self._follow(user, thread_id, route[3], _integer(after, "after"))
        if method == "GET":
            return _json(await self.threads.read(user, thread_id, query.get("before")))
        if method == "PATCH":
            body = await receive_body(request.stream(), request.headers.get("content-length"),
                                      _RENAME_LIMITS)  # fmt: skip
            title = check_title(parse_body(body))
            return _json(await self.threads.rename(user, thread_id, title))
        await self.threads.delete(user, thread_id)
        self._logs.drop(lambda key: key[:2] == (user, thread_id))  # type: ignore[index]
        return Response(status_code=204)

    async def _post_run(self, request: Request, user: str) -> Response:
        """Accept a POSTed run, then stream its events (each with its id in the run)."""
        run_input = self._input(await self._body(request))
        ids = TurnIds(self.channel, user, run_input.thread_id, self.app_name, self.namespace)
        async with self._queues.turn(ids):  # this process's runs of a thread take turns
            run = await self._accept(ids, run_input)
        headers = {"x-run-id": run_input.run_id}
        if run.resubmitted:
            await self.threads.check_owner(user, run_input.thread_id, deleting=ThreadDeletingError)
            replay = _numbered(self._replay(run, run_input))
            return StreamingResponse(replay, media_type=_SSE, headers=headers)
        key = (user, run_input.thread_id, run_input.run_id)
        run_log = self._logs.open(key)
        events = run_log.follow(0)  # before the run starts: its stream misses nothing
        task = asyncio.create_task(self._drive(run, run_input, run_log))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        stream = self._stream(events, task if self.cancel_on_disconnect else None)
        return StreamingResponse(stream, media_type=_SSE, headers=headers)

    async def _follow(self, user: str, thread_id: str, run_id: str, after: int) -> Response:
        """A reconnect: the run's events after id `after`, then the live tail."""
        await self.threads.check_owner(user, thread_id)
        run_log = self._logs.get((user, thread_id, run_id))
        if run_log is None:
            if await self.threads.has_run(user, thread_id, run_id):
                raise RunLogGoneError(f"the events of run {run_id!r} are not kept here")
            raise ThreadNotFoundError(f"no run {run_id!r} in this thread")
        stream = self._stream(run_log.follow(after), None)
        return StreamingResponse(stream, media_type=_SSE, headers={"x-run-id": run_id})

    async def _stream(
        self, events: AsyncIterator[tuple[int, bytes]], task: asyncio.Task[None] | None
    ) -> AsyncIterator[bytes]:
        """A run log's events as SSE frames with their ids; with `task`, the run is cancelled
        (and recorded so) when the client goes away first."""
        ended = False
        try:
            async for number, frame in events:
                yield b"id: %d\n%s" % (number, frame)
            ended = True
        finally:
            if task is not None and not ended and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        return await receive_body(request.stream(), declared, self.limits)

    def _input(self, body: bytes) -> RunAgentInput:
        """The body as a `RunAgentInput`: strict JSON, within the limits, then validated."""
        parsed = parse_body(body)
        check_bounds(parsed, self.limits)
        return RunAgentInput.model_validate(parsed)

    def _read(self, turn: TurnState, run_input: RunAgentInput, *, claim: bool) -> Any:
        return read_input(turn, self.exposed, run_input, claim=claim,
                          max_new_messages=self.limits.max_new_messages)  # fmt: skip

    async def _accept(self, ids: TurnIds, run_input: RunAgentInput) -> Run:
        request = run_input.model_dump(mode="json", by_alias=True, exclude_none=True)

        async def check(turn: TurnState) -> dict[str, Any]:
            given: ThreadInput[Any] = await self._read(turn, run_input, claim=True)
            await self.threads.accepted(turn, run_input)
            # kept: the messages the thread holds as one reference, and only the new ones
            new = {"through": given.through, "new": given.messages}
            return {**request, "messages": new}

        return await accept_run(self.storage, ids, run_input.run_id, request,
                                history=self.history, check=check, **self._timing)  # fmt: skip

    async def _drive(self, run: Run, run_input: RunAgentInput, run_log: RunLog) -> None:
        """Run the agent, its events going to the run's log, whoever follows it."""

        def emit(event: BaseEvent) -> None:
            run_log.append(_frame(event))

        try:
            await self._execute(run, run_input, emit)
        except Exception as failure:  # after the run's own events: the stream still ends
            log.error("run %r stopped short", run.run_id, exc_info=failure)
            run_log.append(_frame(RunErrorEvent(message=_describe(failure),
                                                code=type(failure).__name__)))  # fmt: skip
        finally:
            self._logs.end(run_log)

    async def _execute(
        self, run: Run, run_input: RunAgentInput, emit: Callable[[BaseEvent], None]
    ) -> None:
        thread_id, run_id = run_input.thread_id, run_input.run_id
        emit(RunStartedEvent(thread_id=thread_id, run_id=run_id))
        shown: list[dict[str, Any]] = []  # the stored state, once the client saw a change

        async def attempt(turn: TurnState, number: int) -> tuple[MessagesSnapshotEvent, Any]:
            # again, on the state now: it may have changed since the run was accepted
            given: ThreadInput[Any] = await self._read(turn, run_input, claim=False)
            summary = await self.threads.finishing(turn)
            await turn.history.append(*given.messages)
            self.exposed.store(given.state, turn.session)
            view = self.exposed.view(given.state)
            shown[:] = [given.stored_view]
            emit(StateSnapshotEvent(snapshot=view))  # every attempt starts from the stored
            agent_run = AgentRun(run_input, turn, self.exposed, given.state, view, emit,
                                 messages=await model_messages(turn, run),
                                 pending=given.pending)  # fmt: skip
            await self.agent(agent_run)
            await agent_run.sync()
            self.exposed.store(agent_run.state, turn.session)
            messages = await turn.history.first(await turn.history.count())
            given.sent.value.update({"format": FORMAT, "sent": agent_run.sent,
                                     "last": messages[-1]["id"] if messages else None,
                                     "pending": agent_run.pending})  # fmt: skip
            await self.threads.finished(turn, summary, run_id)
            snapshot = MessagesSnapshotEvent(messages=_MESSAGES.validate_python(messages))
            return snapshot, turn.temp.get("result")

        try:
            async with self._queues.turn(run.ids):  # this process's runs of a thread take turns
                snapshot, result = await execute_run(self.storage, run, attempt, **self._timing)
        except Exception as exc:  # the agent's or the store's: the run is recorded failed
            log.warning("run %r of thread %r failed: %s", run_id, thread_id, exc)
            if shown:
                emit(StateSnapshotEvent(snapshot=shown[0]))
            emit(RunErrorEvent(message=_describe(exc), code=type(exc).__name__))
            return
        emit(snapshot)
        emit(RunFinishedEvent(thread_id=thread_id, run_id=run_id, result=result))

    async def _replay(self, run: Run, run_input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """A resubmitted run: its recorded outcome with the thread's state and messages now."""
        thread, run_id = run_input.thread_id, run_input.run_id
        yield RunStartedEvent(thread_id=thread, run_id=run_id)
        try:
            async with open_turn(self.storage, run.ids) as turn:
                turn.discard()
                view = self.exposed.view(self.exposed.load(turn.session))
                messages = await turn.history.first(await turn.history.count())
                snapshot = MessagesSnapshotEvent(messages=_MESSAGES.validate_python(messages))
        except Exception as exc:
            yield RunErrorEvent(message=_describe(exc), code=type(exc).__name__)
            return
        yield StateSnapshotEvent(snapshot=view)
        yield snapshot
        if run.status == "completed":
            yield RunFinishedEvent(thread_id=thread, run_id=run_id, result=run.result)
        else:
            outcome = "still under way" if run.status == "accepted" else run.status
            yield RunErrorEvent(message=f"run {run_id!r} is {outcome}", code="RunStateError")


_SSE = "text/event-stream"
_ROUTES: dict[int, tuple[str, ...]] = {0: ("POST",), 1: ("GET",), 2: ("GET", "PATCH", "DELETE"),
                                        4: ("GET",)}  # fmt: skip


def _route(scope: Scope) -> tuple[tuple[str, ...] | None, str | None]:
    """The request's route below the mount point, as path segments (percent-decoded): `()`
    for runs, `("threads",)`, `("threads", id)`, `("threads", id, "runs", id, "events")`;
    None with the methods the path allows (None: no such path)."""
    root = [part for part in str(scope.get("root_path", "")).split("/") if part]
    raw = scope.get("raw_path") or str(scope["path"]).encode()
    parts = [unquote(part) for part in raw.decode("latin-1").split("/") if part]
    if parts[: len(root)] == root:
        parts = parts[len(root) :]
    shape = len(parts)
    if shape == 5 and (parts[2], parts[4]) == ("runs", "events"):
        shape = 4
    elif parts[:1] != ["threads"] and parts:
        shape = -1
    allowed = _ROUTES.get(shape)
    if allowed is None or (shape and parts[0] != "threads"):
        return None, None
    if scope["method"] not in allowed:
        return None, ", ".join(allowed)
    return tuple(parts), None


def _integer(text: str, what: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise RunInputError(f"{what} must be a whole number, got {text[:40]!r}")
    return int(text)


def _frame(event: BaseEvent) -> bytes:
    """One event as an SSE frame without its id (`id: n` goes in front when it is sent)."""
    return _ENCODER.encode(event).encode()


_ENCODER = EventEncoder()


async def _numbered(events: AsyncIterator[BaseEvent]) -> AsyncIterator[bytes]:
    """A replayed run's events as SSE frames numbered from 1 (kept in no log)."""
    number = 0
    async for event in events:
        number += 1
        yield b"id: %d\n%s" % (number, _frame(event))


def _json(value: Any, status: int = 200) -> Response:
    """A JSON response, encoded by orjson (a thread's page of messages is most of a read)."""
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


def _refusal(status: int, detail: str) -> Response:
    log.info("run refused: status=%d", status)  # the detail may quote the input: not logged
    return _json({"detail": detail}, status)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
