"""Routes: selectors over the turn and the handlers they pick (the app runs the first match)."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ._activity import Activity
from ._context import TurnContext
from ._plan import Declaration

if TYPE_CHECKING:
    from ._turn_state import TurnState

Handler = Callable[[TurnContext, "TurnState"], Awaitable[None]]
"""`async def handler(ctx, state) -> None`."""

Selector = Callable[[TurnContext], bool | Awaitable[bool]]
"""A sync or async predicate over the turn's context."""

Match = Callable[[Activity], bool]
"""A predicate over the activity alone (the selectors of `message()` and `activity()`), so
the route can be chosen before the turn reads its state."""

_F = TypeVar("_F")


def require_async(function: _F, role: str) -> _F:
    """Return `function` if calling it gives a coroutine: an `async def` function or method,
    a `functools.partial` of one, or an object whose `__call__` is one.

    A plain function would fail only when a turn awaits its result, so it is refused here,
    when it is registered, with a `TypeError` naming it and its role.
    """
    target: object = function
    while isinstance(target, functools.partial):
        target = target.func
    call = getattr(target, "__call__", None)  # noqa: B004 - the method itself is checked
    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(call):
        return function
    raise TypeError(f"the {role} {function!r} must be an async function (async def)")


@dataclass(frozen=True, slots=True)
class Route:
    """A selector and the handler it sends matching turns to.

    `rerun`: whether a turn of this route may run again when its save meets a conflict it
    cannot merge (False for handlers with outside effects: the turn then fails instead).
    `claim`: whether the turn claims its activity before the handler runs (see `_delivery`).
    `match`: the selector over the activity alone, when it is one; `declared`: the scopes the
    route declares it uses (its turns read only those).
    """

    selector: Selector
    handler: Handler
    rerun: bool = True
    claim: bool = False
    match: Match | None = None
    declared: Declaration | None = None


def choose_early(routes: list[Route], activity: Activity) -> Route | None:
    """The route a turn of `activity` takes, when the activity alone decides it (every route
    before it selects by the activity alone); None when that takes the turn's state."""
    for route in routes:
        if route.match is None:
            return None
        if route.match(activity):
            return route
    return None


def over_context(match: Match) -> Selector:
    """The selector of a route that selects by the activity alone."""
    return lambda ctx: match(ctx.activity)


def text_match(pattern: str | re.Pattern[str] | None) -> Match:
    """Match messages: a str against the whole trimmed text, ignoring case; a regex anywhere."""
    if pattern is None:
        return lambda activity: _is_type(activity, "message")
    if isinstance(pattern, re.Pattern):
        return lambda activity: (
            _is_type(activity, "message") and pattern.search(_text(activity)) is not None
        )
    if isinstance(pattern, str):
        wanted = pattern.strip().casefold()
        return lambda activity: (
            _is_type(activity, "message") and _text(activity).casefold() == wanted
        )
    raise TypeError(f"message() takes a str or a compiled regex, not {type(pattern).__name__}")


def type_match(activity_type: str) -> Match:
    """Match activities of one type (`message`, `conversationUpdate`, ...), ignoring case."""
    if not isinstance(activity_type, str) or not activity_type:
        raise TypeError("activity() takes a non-empty activity type string")
    wanted = activity_type.casefold()
    return lambda activity: _is_type(activity, wanted)


def _is_type(activity: Activity, casefolded: str) -> bool:
    return activity.type.casefold() == casefolded


def _text(activity: Activity) -> str:
    """The activity's text as `TurnContext.text` gives it: trimmed, `""` when it has none."""
    return (activity.text or "").strip()
