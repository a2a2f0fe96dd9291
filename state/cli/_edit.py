"""`agent-state edit`, `set` and `delete`: changes conditional on the version read or given,
so a concurrent change is refused, never overwritten."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import orjson

from ..backends import ANY, ConflictError, Storage, StoreItem
from ._output import parse_document
from ._store import CommandError, run_on_store

if_version = click.option(
    "--if-version", metavar="VERSION", help="Only if the stored version is still VERSION."
)


@click.command()
@click.argument("key")
@click.pass_context
def edit(ctx: click.Context, key: str) -> None:
    """Open the document at KEY in $EDITOR (a new one: {}) and store what you save, only if
    nobody changed it meanwhile."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        raise CommandError("set $EDITOR (or $VISUAL) to the editor to open")
    item = run_on_store(ctx, lambda storage: _read_one(storage, key))
    before = item.value if item is not None else {}
    text = orjson.dumps(before, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    with tempfile.TemporaryDirectory(prefix="agent-state-edit-") as folder:
        path = Path(folder) / "document.json"
        path.write_bytes(text)
        status = subprocess.run([*shlex.split(editor), str(path)], check=False).returncode
        if status != 0:
            raise CommandError(f"the editor exited with status {status}; nothing was written")
        edited = path.read_bytes()
    if edited == text:
        click.echo(f"{key}: unchanged, nothing written")
        return
    after = parse_document(edited.decode("utf-8", "replace"), "the edited document")
    if after == before:
        click.echo(f"{key}: unchanged, nothing written")
        return
    etag = item.etag if item is not None else None
    version = run_on_store(ctx, lambda storage: _write(storage, key, after, etag))
    click.echo(f"{key}: saved as version {version}")


@click.command("set")
@click.argument("key")
@click.argument("document", default="-")
@if_version
@click.option("--if-absent", is_flag=True, help="Only if nothing is stored at KEY.")
@click.pass_context
def set_(
    ctx: click.Context, key: str, document: str, if_version: str | None, if_absent: bool
) -> None:
    """Store DOCUMENT (a JSON object; '-' or none: read it from stdin) at KEY."""
    if if_version is not None and if_absent:
        raise click.UsageError("--if-version and --if-absent exclude each other")
    text = sys.stdin.read() if document == "-" else document
    value = parse_document(text, "DOCUMENT")
    etag = None if if_absent else (if_version or ANY)
    version = run_on_store(ctx, lambda storage: _write(storage, key, value, etag))
    click.echo(f"{key}: saved as version {version}")


@click.command()
@click.argument("keys", nargs=-1, required=True)
@if_version
@click.pass_context
def delete(ctx: click.Context, keys: tuple[str, ...], if_version: str | None) -> None:
    """Delete the documents at KEYS (missing ones are no-ops)."""
    if if_version is not None and len(keys) != 1:
        raise click.UsageError("--if-version takes exactly one KEY")
    condition = {keys[0]: if_version} if if_version is not None else None

    async def remove(storage: Storage) -> None:
        try:
            await storage.delete(list(keys), if_match=condition)
        except ConflictError:
            raise CommandError(_changed(keys[0], "deleted")) from None

    run_on_store(ctx, remove)
    click.echo(f"deleted {len(keys)} key(s)")


async def _read_one(storage: Storage, key: str) -> StoreItem | None:
    return (await storage.read([key])).get(key)


async def _write(storage: Storage, key: str, value: dict[str, Any], etag: str | None) -> str:
    """Write `value` at `key` on the precondition `etag`; a conflict is a clear refusal."""
    try:
        etags: dict[str, str] = await storage.write({key: StoreItem(value, etag)})
    except ConflictError:
        raise CommandError(_changed(key, "written")) from None
    return etags[key]


def _changed(key: str, what: str) -> str:
    return (
        f"{key!r} changed since it was read (or its version is not the one given); "
        f"nothing was {what}: read it again and retry"
    )


commands = (edit, set_, delete)
