"""`agent-state ls`: the keys under a prefix, a page at a time, in key order."""

from __future__ import annotations

import bisect

import click

from ..backends import Storage
from ._output import show
from ._store import json_option, run_on_store


@click.command("ls")
@click.argument("prefix", default="")
@click.option("--limit", default=50, show_default=True, help="Keys per page.")
@click.option("--after", metavar="KEY", help="Start after this key (the previous page's last).")
@json_option
@click.pass_context
def command(ctx: click.Context, prefix: str, limit: int, after: str | None, as_json: bool) -> None:
    """List the stored keys that start with PREFIX, LIMIT at a time; the next page starts
    with `--after` the last key shown."""
    if limit < 1:
        raise click.BadParameter("must be at least 1", param_hint="--limit")
    keys, more = run_on_store(ctx, lambda storage: _page(storage, prefix, limit, after))
    following = keys[-1] if more else None
    if as_json:
        show({"keys": keys, "next_after": following}, True)
        return
    for key in keys:
        click.echo(key)
    if following is not None:
        click.echo(f"more: agent-state ls {prefix!r} --after {following!r}", err=True)


async def _page(
    storage: Storage, prefix: str, limit: int, after: str | None
) -> tuple[list[str], bool]:
    """The first `limit` keys after `after`, in order (stores list in no order, so this
    keeps the smallest `limit + 1` seen: bounded memory), and whether there are more."""
    smallest: list[str] = []
    async for key in storage.list(prefix):
        if after is not None and key <= after:
            continue
        if len(smallest) <= limit:
            bisect.insort(smallest, key)
        elif key < smallest[-1]:
            bisect.insort(smallest, key)
            smallest.pop()
    return smallest[:limit], len(smallest) > limit
