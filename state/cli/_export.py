"""`agent-state export`: every document of the store (or under a prefix) to a JSON lines file."""

from __future__ import annotations

import os

import click

from .. import export_store
from ._progress import counting
from ._store import run_on_store


@click.command("export")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
@click.option("--prefix", default="", help="Export only the keys that start with this.")
@click.pass_context
def command(ctx: click.Context, file: str, prefix: str) -> None:
    """Write every stored document (key, version, remaining TTL, value) to FILE, one JSON line
    each. It is written to FILE.partial and renamed once complete, so FILE is never half an
    export; `agent-state import FILE` restores it."""
    partial = f"{file}.partial"
    with counting("exported") as progress, open(partial, "wb") as out:
        report = run_on_store(ctx, lambda storage: export_store(storage, out, prefix=prefix,
                                                                progress=progress))  # fmt: skip
    os.replace(partial, file)
    click.echo(f"exported {report.documents} documents to {file}")
