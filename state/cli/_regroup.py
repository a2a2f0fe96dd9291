"""`agent-state regroup`: move what agent-state 0.1.0 wrote to today's write groups."""

from __future__ import annotations

import asyncio

import click

from .. import RegroupReport, earlier_write_group, regroup
from ._progress import counting
from ._store import open_store


@click.command("regroup")
@click.option("--prefix", default="", help="Only keys starting with this (e.g. a namespace/).")
@click.pass_context
def command(ctx: click.Context, prefix: str) -> None:
    """Move the documents a store kept under agent-state 0.1.0's write groups (a user's own
    records, on Redis and Cosmos DB) to today's, and index them on Redis. Run it once after
    upgrading, with no writer of the store up; running it again finishes an interrupted run."""

    async def main() -> RegroupReport:
        async with (
            open_store(ctx) as storage,
            open_store(ctx, write_group=earlier_write_group) as earlier,
        ):
            return await regroup(storage, earlier, prefix=prefix, progress=progress)

    with counting("looked at") as progress:
        report = asyncio.run(main())
    click.echo(
        f"moved {report.moved} documents to their write group, wrote {report.rewritten} again "
        f"in place (Redis's index), {report.current} were current"
    )
