"""What every command shares: the global options, opening the store, the command's error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .. import open_storage
from ..backends import Storage

T = TypeVar("T")


class CommandError(Exception):
    """A command cannot go on; its message says what to fix (printed as one line)."""


@dataclass(frozen=True)
class Options:
    """The group's options, handed to every command."""

    store: str | None


def open_store(ctx: click.Context, **storage_options: Any) -> Storage:
    """The store named by `--store` (or $AGENT_STATE_URL), opened (with `open_storage`'s
    `storage_options`); the caller closes it."""
    options = ctx.find_object(Options)
    url = options.store if options is not None else None
    if not url:
        raise CommandError("no store given: pass --store URL or set AGENT_STATE_URL")
    try:
        return open_storage(url, **storage_options)
    except ImportError as exc:
        scheme = url.split("://", 1)[0]
        raise CommandError(
            f"{scheme}:// stores need {exc.name or 'an optional package'}: "
            "pip install -e '.[all]' in the agent-state clone (or the extra of that backend)"
        ) from None


def run_on_store(ctx: click.Context, work: Callable[[Storage], Awaitable[T]]) -> T:
    """Open the store named by `--store` (or $AGENT_STATE_URL), run `work` on it, close it."""

    async def main() -> T:
        async with open_store(ctx) as storage:
            return await work(storage)

    return asyncio.run(main())


json_option = click.option("--json", "as_json", is_flag=True, help="Print compact JSON.")
