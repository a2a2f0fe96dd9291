"""`agent-state import`: restore an export into the store, never overwriting a document."""

from __future__ import annotations

import click

from .. import import_store
from ._progress import counting
from ._store import run_on_store


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
def command(ctx: click.Context, file: str) -> None:
    """Create every document of the export FILE that the store does not hold, living as long
    as it had left when exported. FILE is checked whole first (a half-finished export is
    refused); a document the store holds is kept, so running it again resumes it."""
    with counting("imported") as progress:
        report = run_on_store(ctx, lambda storage: import_store(storage, file, progress=progress))
    click.echo(
        f"imported {report.written} documents; {report.present} already present (kept), "
        f"{report.expired} expired since the export (skipped)"
    )
