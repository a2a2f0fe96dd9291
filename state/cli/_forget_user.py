"""`agent-state forget-user`: delete everything stored about one user on one channel."""

from __future__ import annotations

import click

from .. import forget_user
from ._progress import counting
from ._store import run_on_store


@click.command("forget-user")
@click.option("--channel", required=True, help="The channel id.")
@click.option("--user", required=True, help="The user id on that channel.")
@click.option("--namespace", help="The namespace the bot's keys are under, if any.")
@click.pass_context
def command(ctx: click.Context, channel: str, user: str, namespace: str | None) -> None:
    """Delete the user's bucket, sessions (history, runs, AG-UI threads) and the records that
    name them; conversation buckets shared with others are kept. Safe while the user's turns
    run; an interrupted run is finished by the next one."""
    with counting("deleted") as progress:
        report = run_on_store(ctx, lambda storage: forget_user(
            storage, channel, user, namespace=namespace, progress=progress))  # fmt: skip
    click.echo(
        f"forgot user {user!r} on channel {channel!r}: deleted {report.documents} documents "
        f"(listed {report.listed} keys, read {report.read}, in {report.passes} passes)"
    )
