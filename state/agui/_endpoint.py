"""The AG-UI endpoint: an ASGI app that takes a POSTed `RunAgentInput` and streams the run.

Everything that can refuse a run is checked before the stream starts, in the turn that
records the run as accepted, so a refusal is an HTTP status with nothing written: 401 (no
user), 408 (the body took too long), 413 (`RequestLimits` exceeded), 422 (`RunInputError`,
strict JSON included), 403 (`ThreadOwnerError`), 409 (the run id with another input), 503
(the store is unreachable). The run itself is one turn of the thread's session
(`execute_run`): its state, history appends and completion commit together after the
agent returns, then MESSAGES_SNAPSHOT and RUN_FINISHED follow; a failure is RUN_ERROR,
preceded by a STATE_SNAPSHOT of the stored state once the run had sent state. The same run
id with the same input replays the recorded run.

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
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .. import (
    HistoryError,
    MissingIdError,
    Run,
    RunConflictError,
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
from ._server_errors import RunInputError, ThreadOwnerError
from ._thread_input import FORMAT, ThreadInput, read_input

log = logging.getLogger("agent_state.agui.server")

Authenticate = Callable[[Request], "Awaitable[str | None] | str | None"]
"""Who the request is from (a user id), from the application's authentication; None: 401."""
Agent = Callable[[AgentRun[Any]], Awaitable[None]]
"""The agent: `async def agent(run)`, changing `run.state` and speaking through `run`."""

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


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
    ) -> None:
        """`state`: the pydantic model of the exposed thread state (fields named in
        `server_only` are stored but never sent or accepted). `authenticate(request)` names
        the user; the request body never does. `app_name` names the agent: its threads,
        runs and history are its own. `drop_reasoning` leaves reasoning messages out of the
        history the agent is given (`without_prior_reasoning`); `clock` and `lease` (None:
        the default) time the runs' leases (see `accept_run`)."""
        self.agent, self.storage, self.exposed = agent, storage, ExposedState(state, server_only)
        self.authenticate, self.limits = authenticate, limits
        self.channel, self.app_name, self.namespace = channel, app_name, namespace
        self.history = thread().without_prior_reasoning() if drop_reasoning else thread()
        self._timing: dict[str, Any] = {"clock": clock}
        if lease is not None:
            self._timing["lease"] = lease
        self._queues = TurnQueues()

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
        """The response to one request: an error status, or the run's event stream."""
        if request.method != "POST":
            return _refusal(405, "POST a RunAgentInput")
        user = self.authenticate(request)
        user = await user if inspect.isawaitable(user) else user
        if not user:
            return _refusal(401, "not authenticated")
        try:
            run_input = self._input(await self._body(request))
            ids = TurnIds(self.channel, user, run_input.thread_id, self.app_name, self.namespace)
            async with self._queues.turn(ids):  # this process's runs of a thread take turns
                run = await self._accept(ids, run_input)
        except (RunInputError, ThreadOwnerError) as exc:
            return _refusal(exc.status_code, str(exc))
        except ValidationError as exc:
            return _refusal(422, f"not a valid RunAgentInput: {validation_summary(exc)}")
        except (InvalidKeyError, MissingIdError, HistoryError) as exc:
            return _refusal(422, f"not a valid RunAgentInput: {exc}")
        except RunConflictError as exc:
            return _refusal(409, str(exc))
        except StorageError as exc:
            log.warning("run refused, the store failed: %s", exc)
            return _refusal(503, "the state store is unavailable")
        except StateValidationError as exc:  # stored data the model refuses: not the client's
            log.error("run refused, the stored thread state is invalid: %s", exc)
            return _refusal(500, f"the stored thread state is invalid: {exc}")
        except ClientDisconnect:
            return _refusal(400, "the client went away")
        encoder = EventEncoder(accept=request.headers.get("accept", ""))
        events = self._replay(run, run_input) if run.resubmitted else self._run(run, run_input)
        return StreamingResponse(
            (encoder.encode(event) async for event in events),
            media_type=encoder.get_content_type(),
        )

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
            # kept: the messages the thread holds as one reference, and only the new ones
            new = {"through": given.through, "new": given.messages}
            return {**request, "messages": new}

        return await accept_run(self.storage, ids, run_input.run_id, request,
                                history=self.history, check=check, **self._timing)  # fmt: skip

    async def _run(self, run: Run, run_input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        """Run the agent in a task whose events stream as they come; cancelled (and recorded
        so) when the client goes away."""
        queue: asyncio.Queue[BaseEvent | None] = asyncio.Queue()
        task = asyncio.create_task(self._execute(run, run_input, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            failure = task.exception()
            if failure is not None:  # after the run's own events: the stream still ends
                log.error("run %r stopped short", run.run_id, exc_info=failure)
                yield RunErrorEvent(message=_describe(failure), code=type(failure).__name__)
        finally:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _execute(
        self, run: Run, run_input: RunAgentInput, emit: Callable[[BaseEvent], None]
    ) -> None:
        thread_id, run_id = run_input.thread_id, run_input.run_id
        emit(RunStartedEvent(thread_id=thread_id, run_id=run_id))
        shown: list[dict[str, Any]] = []  # the stored state, once the client saw a change

        async def attempt(turn: TurnState, number: int) -> tuple[MessagesSnapshotEvent, Any]:
            # again, on the state now: it may have changed since the run was accepted
            given: ThreadInput[Any] = await self._read(turn, run_input, claim=False)
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


def _refusal(status: int, detail: str) -> JSONResponse:
    log.info("run refused: status=%d", status)  # the detail may quote the input: not logged
    return JSONResponse({"detail": detail}, status_code=status)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
