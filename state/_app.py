"""`AgentApplication`: route each incoming activity to a handler around one load and one save.

A turn is: load every bucket in one batched read, run the before-turn hooks, run the first
matching route, run the after-turn hooks, save the changed buckets in at most one write,
return the replies. The application object holds only configuration and routes, so one
instance serves any number of concurrent turns.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel

from ._activity import Activity, ActivityError, received
from ._bucket import AgentState
from ._context import TurnContext
from ._delivery import (
    CLAIM_LEASE_SECONDS,
    RETENTION_SECONDS,
    Delivery,
    claim_activity,
    digest,
    evidence_name,
    evidence_prefix,
    recorded_replies,
    remember,
)
from ._errors import ScopeError
from ._events import report
from ._ids import TurnIds
from ._lifecycle import TURN_ATTEMPTS, run_turn
from ._plan import PLAN_CACHE_SIZE, Declaration, Plan, Scopes
from ._queue import TurnQueues
from ._routing import (
    Handler,
    Match,
    Route,
    Selector,
    choose_early,
    over_context,
    require_async,
    text_match,
    type_match,
)
from ._turn_state import TurnState, first_read
from .backends import Storage

Hook = Callable[[TurnContext, TurnState], Awaitable[bool | None]]
"""`async def hook(ctx, state)`; returning `False` stops the hooks after it."""

ErrorHandler = Callable[[TurnContext, Exception], Awaitable[None]]
"""`async def on_error(ctx, error)`; runs when a hook, selector or handler raises."""

_H = TypeVar("_H", bound=Handler)
_Hook = TypeVar("_Hook", bound=Hook)
_Err = TypeVar("_Err", bound=ErrorHandler)


class AgentApplication:
    """Routes activities to `async def handler(ctx, state)` functions with persistent state.

    Routes are tried in registration order and the first match handles the turn.
    A before-turn hook returning `False` ends the turn early (no route runs); what changed
    so far is still saved. An exception from your code (hook, selector, handler) saves
    nothing and goes to the `@app.error` handler, or out of `process` if there is none.
    Storage errors from loading or saving always propagate.

    Concurrent turns: in one process, the turns of one conversation (of one user, without
    a conversation) wait for each other and run in arrival order. When a save still meets
    another writer's change (another process, or another conversation sharing the user or
    app bucket), the turn's changes merge into the newer version if the other writer changed
    nothing the turn read or wrote; otherwise the turn runs again on the newer state
    (`ctx.attempt` counts the runs; replies of an earlier run are dropped), at most
    `turn_attempts` times. A route registered with `rerun=False` fails with
    `StateConflictError` instead, nothing of the turn saved. A route registered with
    `claim=True` (handlers with outside effects) also claims its activity in storage before
    the handler runs, so the handler runs at most once across processes while the claim's
    lease (`claim_lease` seconds) holds; see `_delivery`.

    Exactly once: an activity with an id is applied once within `dedup_retention` seconds
    (None: no deduplication); its evidence travels inside a document the turn writes anyway.

    A route of `message()` or `activity()` may declare the stored scopes it uses
    (`scopes=("user", "conversation")`): its turns read only those (one batched read), and
    using another (its hooks too) raises `UndeclaredScopeError`. Such a route is chosen
    before the state is read, which is why only these selectors over the activity alone
    take `scopes=`. `temp` and other unstored scopes are always there.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        app_name: str | None = None,
        custom_scopes: Iterable[type[AgentState]] = (),
        namespace: str | None = None,
        dedup_retention: float | None = RETENTION_SECONDS,
        claim_lease: float = CLAIM_LEASE_SECONDS,
    ) -> None:
        self.storage = storage
        self.app_name = app_name
        self.namespace = namespace
        self.custom_scopes = tuple(custom_scopes)
        self._scopes = Scopes(self.custom_scopes)
        self._routes: list[Route] = []
        self._before: list[Hook] = []
        self._after: list[Hook] = []
        self._on_error: ErrorHandler | None = None
        self._queues = TurnQueues(carry=True, claim_of=self._first_read)
        self.turn_attempts = TURN_ATTEMPTS
        if dedup_retention is not None:
            _positive(dedup_retention, "dedup_retention")
        self.dedup_retention = dedup_retention
        self.claim_lease = _positive(claim_lease, "claim_lease")
        self._ids = lru_cache(maxsize=PLAN_CACHE_SIZE)(_Seen)
        """What depends on the ids of recent turns alone (their `TurnIds`, one object per
        distinct ids, so plan lookups find them by identity; their queue's key; their
        `evidence_prefix`): built once, not on every turn."""

    def message(
        self,
        pattern: str | re.Pattern[str] | None = None,
        *,
        rerun: bool = True,
        claim: bool = False,
        scopes: Iterable[str] | None = None,
    ) -> Callable[[_H], _H]:
        """Route messages: a str matches the whole trimmed text ignoring case, a regex is
        searched in it, `None` matches every message. `rerun=False`: a conflict fails the
        turn instead of running the handler again; `claim=True`: that, and the activity is
        claimed before the handler runs; `scopes`: the only stored scopes the route uses
        (see the class docstring)."""
        match = text_match(pattern)
        return self._route(over_context(match), match, rerun, claim, scopes)

    def activity(
        self,
        activity_type: str,
        *,
        rerun: bool = True,
        claim: bool = False,
        scopes: Iterable[str] | None = None,
    ) -> Callable[[_H], _H]:
        """Route activities of one type, e.g. `"conversationUpdate"` or `"event"`."""
        match = type_match(activity_type)
        return self._route(over_context(match), match, rerun, claim, scopes)

    def route(
        self, selector: Selector, *, rerun: bool = True, claim: bool = False
    ) -> Callable[[_H], _H]:
        """Route turns for which `selector(ctx)` (sync or async) is true."""
        if not callable(selector):
            raise TypeError("route() takes a callable selector(ctx)")
        return self._route(selector, None, rerun, claim, None)

    def before_turn(self, hook: _Hook) -> _Hook:
        """Run `hook(ctx, state)` before routing; returning `False` ends the turn there."""
        self._before.append(require_async(hook, "before_turn hook"))
        return hook

    def after_turn(self, hook: _Hook) -> _Hook:
        """Run `hook(ctx, state)` after the handler, before saving; `False` stops later hooks."""
        self._after.append(require_async(hook, "after_turn hook"))
        return hook

    def error(self, handler: _Err) -> _Err:
        """Set the one error handler, `async def on_error(ctx, error)`."""
        if self._on_error is not None:
            raise ValueError("this application already has an error handler")
        self._on_error = require_async(handler, "error handler")
        return handler

    async def process(self, activity: Activity | Mapping[str, Any] | BaseModel) -> list[Activity]:
        """Run one turn for `activity` (ours, a wire dict or an Agents SDK activity) and
        return the replies it sent. A malformed activity raises `ActivityError` naming the
        field, before anything is read."""
        try:
            activity, wire = received(activity)
        except ActivityError as exc:
            report("refused", field=exc.field, others=exc.others)
            raise
        sender, conversation = activity.from_property, activity.conversation
        seen = self._ids(
            activity.channel_id,
            sender.id if sender is not None else None,
            conversation.id if conversation is not None else None,
            self.app_name,
            self.namespace,
        )
        ids = seen.ids
        retention = self.dedup_retention
        delivery = None
        if activity.id and ids.channel_id and retention is not None:
            prefix = seen.prefix
            if prefix is None:  # the ids escaped once, by the first turn with an activity id
                prefix = seen.prefix = evidence_prefix(ids)
            name = evidence_name(prefix, activity.id)
            delivery = Delivery(name, digest(activity, wire), retention)
        early = choose_early(self._routes, activity)

        async def turn(state: TurnState, attempt: int) -> list[Activity]:
            if delivery is not None:
                first = recorded_replies(state, delivery, activity)
                if first is not None:  # a redelivery: the first processing's outcome
                    report("redelivery", ids, activity=activity.id, replies=len(first))
                    state.discard()
                    return first
            ctx = TurnContext(activity, state, attempt)
            try:
                claimed = await self._run(ctx, state, delivery, early)
            except Exception as error:
                if self._on_error is None:
                    raise
                state.discard()
                await self._on_error(ctx, error)
                return ctx.replies
            if delivery is not None:
                remember(state, delivery, activity, ctx.replies, claimed=claimed)
            return ctx.replies

        declared = early.declared if early is not None else None
        place = self._queues.turn(seen.queue, (ids, declared))
        waiting = place.take()
        if waiting is not None:
            place.prefetch(self.storage.read)
            await place.wait(waiting)
        try:
            return await run_turn(
                self.storage,
                ids,
                turn,
                scopes=self._scopes,
                attempts=self.turn_attempts,
                queues=self._queues,
                declared=declared,
            )
        finally:
            place.leave()

    def _first_read(self, claimant: tuple[TurnIds, Declaration | None]) -> tuple[str, ...]:
        """The keys the turn of `(ids, declared)` reads first: what its queue's claims count."""
        ids, declared = claimant
        plan: Plan = self._scopes.plan(ids)
        keys: tuple[str, ...] = first_read(plan, declared)
        return keys

    async def _run(
        self,
        ctx: TurnContext,
        state: TurnState,
        delivery: Delivery | None,
        early: Route | None,
    ) -> bool:
        """Run the hooks and the matching route (`early`, when chosen before the read, else
        the first match); whether the route claimed the activity (then its evidence replaces
        the claim in the turn's home document, see `_delivery`)."""
        claimed = False
        if self._before and not await _run_hooks(self._before, ctx, state):
            return claimed
        for route in (early,) if early is not None else self._routes:  # in registration order
            if early is None:
                matched = route.selector(ctx)
                if type(matched) is not bool and inspect.isawaitable(matched):
                    matched = await matched
                if not matched:
                    continue
            if route.claim and delivery is not None:
                await claim_activity(self.storage, state, delivery, ctx.activity, self.claim_lease)
                claimed = True
            if not route.rerun or route.claim:
                state.forbid_rerun()
            await route.handler(ctx, state)
            break
        if self._after:
            await _run_hooks(self._after, ctx, state)
        return claimed

    def _route(
        self,
        selector: Selector,
        match: Match | None,
        rerun: bool,
        claim: bool,
        scopes: Iterable[str] | None,
    ) -> Callable[[_H], _H]:
        """Register a route (`match`: its selector over the activity alone, when it is one)."""
        if not isinstance(rerun, bool) or not isinstance(claim, bool):
            raise TypeError(f"rerun and claim must be True or False, got {rerun!r}, {claim!r}")
        if claim and self.dedup_retention is None:
            raise ValueError("claim=True needs activity records: dedup_retention is None")
        names = self._declared_scopes(scopes)

        def register(handler: _H) -> _H:
            handler = require_async(handler, "route handler")
            declared = None
            if names is not None:
                declared = Declaration(names, getattr(handler, "__qualname__", repr(handler)))
            self._routes.append(Route(selector, handler, rerun, claim, match, declared))
            return handler

        return register

    def _declared_scopes(self, scopes: Iterable[str] | None) -> frozenset[str] | None:
        """The stored scopes a route declares (`scopes=`), each a scope of this application;
        `ScopeError` naming an unknown one. A str is refused (it would read as its letters)."""
        if scopes is None:
            return None
        if isinstance(scopes, str):
            raise TypeError(f"scopes= takes scope names, e.g. ({scopes!r},), not a str")
        names = frozenset(scopes)
        unknown = sorted(names - self._scopes.names)
        if unknown:
            known = ", ".join(sorted(self._scopes.names))
            raise ScopeError(f"scopes= names unknown scope(s) {unknown}; known: {known}")
        return names


def _positive(seconds: object, name: str) -> float:
    """`seconds` when it is a positive number (ValueError naming `name` otherwise)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


class _Seen:
    """What depends on a turn's ids alone: its `TurnIds`, the key of its queue (`_queue_key`)
    and, once a turn with an activity id needed it, its `evidence_prefix`."""

    __slots__ = ("ids", "queue", "prefix")

    def __init__(
        self,
        channel: str | None,
        user: str | None,
        conversation: str | None,
        app_name: str | None,
        namespace: str | None,
    ) -> None:
        self.ids = TurnIds(channel, user, conversation, app_name, namespace)
        self.queue = _queue_key(self.ids)
        self.prefix: str | None = None


def _queue_key(ids: TurnIds) -> tuple[str | None, ...] | None:
    """The turns that share a queue: those of one conversation, else of one user."""
    if ids.conversation_id:
        return (ids.namespace, ids.channel_id, "conversation", ids.conversation_id)
    if ids.user_id:
        return (ids.namespace, ids.channel_id, "user", ids.user_id)
    return None


async def _run_hooks(hooks: list[Hook], ctx: TurnContext, state: TurnState) -> bool:
    """Run hooks in order until one returns `False`; say whether all of them ran."""
    for hook in hooks:
        if await hook(ctx, state) is False:
            return False
    return True
