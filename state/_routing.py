"""Routes: selectors over the turn and the handlers they pick (the app runs the first match)."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ._context import TurnContext

if TYPE_CHECKING:
    from ._turn_state import TurnState

Handler = Callable[[TurnContext, "TurnState"], Awaitable[None]]
"""`async def handler(ctx, state) -> None`."""

Selector = Callable[[TurnContext], bool | Awaitable[bool]]
"""A sync or async predicate over the turn's context."""

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
    """

    selector: Selector
    handler: Handler
    rerun: bool = True
    claim: bool = False


def text_selector(pattern: str | re.Pattern[str] | None) -> Selector:
    """Match messages: a str against the whole trimmed text, ignoring case; a regex anywhere."""
    if pattern is None:
        return lambda ctx: _is_type(ctx, "message")
    if isinstance(pattern, re.Pattern):
        return lambda ctx: _is_type(ctx, "message") and pattern.search(ctx.text) is not None
    if isinstance(pattern, str):
        wanted = pattern.strip().casefold()
        return lambda ctx: _is_type(ctx, "message") and ctx.text.casefold() == wanted
    raise TypeError(f"message() takes a str or a compiled regex, not {type(pattern).__name__}")


def type_selector(activity_type: str) -> Selector:
    """Match activities of one type (`message`, `conversationUpdate`, ...), ignoring case."""
    if not isinstance(activity_type, str) or not activity_type:
        raise TypeError("activity() takes a non-empty activity type string")
    wanted = activity_type.casefold()
    return lambda ctx: _is_type(ctx, wanted)


def _is_type(ctx: TurnContext, casefolded: str) -> bool:
    return ctx.activity.type.casefold() == casefolded
