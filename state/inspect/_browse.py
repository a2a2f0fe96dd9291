"""What the pages list: one bounded page of keys in key order, each with its parsed ids."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from .. import ParsedKey, parse_key
from ..backends import InvalidKeyError, Storage

VIEWS: dict[str, tuple[str, Callable[[ParsedKey | None], bool]]] = {
    "users": ("Users", lambda p: p is not None and p.scope == "user" and p.kind == "state"),
    "conversations": (
        "Conversations",
        lambda p: p is not None and p.scope == "conversation" and p.kind == "state",
    ),
    "sessions": (
        "Sessions",
        lambda p: p is not None and p.scope == "session" and p.kind == "state",
    ),
    "app": ("App state", lambda p: p is not None and p.scope == "app"),
    "all": ("All keys", lambda p: True),
}
"""Each listing: its title and which keys it shows (None: a key outside the key scheme)."""


@dataclass(frozen=True)
class Row:
    """One listed key and what `parse_key` read from it (None: not a key of the scheme)."""

    key: str
    parsed: ParsedKey | None


@dataclass(frozen=True)
class Page:
    """A page of rows and the key the next page starts after (None: the last page)."""

    rows: list[Row]
    next_after: str | None


def parsed(key: str, namespace: str | None) -> ParsedKey | None:
    """`parse_key(key)`, or None for a key the scheme does not know."""
    try:
        return parse_key(key, namespace=namespace)
    except InvalidKeyError:
        return None


async def page(
    storage: Storage,
    *,
    prefix: str,
    view: str,
    after: str | None,
    limit: int,
    namespace: str | None,
) -> Page:
    """The first `limit` keys of `view` under `prefix` after `after`, in key order. Stores
    list in no order, so this keeps the smallest `limit + 1` it meets: bounded memory."""
    wanted = VIEWS[view][1]
    smallest: list[Row] = []
    async for key in storage.list(prefix):
        if after is not None and key <= after:
            continue
        if len(smallest) > limit and key >= smallest[-1].key:
            continue
        info = parsed(key, namespace)
        if not wanted(info):
            continue
        bisect.insort(smallest, Row(key, info), key=lambda row: row.key)
        if len(smallest) > limit + 1:
            smallest.pop()
    more = len(smallest) > limit
    rows = smallest[:limit]
    return Page(rows, rows[-1].key if more else None)
