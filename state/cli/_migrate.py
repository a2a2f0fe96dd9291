"""`agent-state migrate`: bring every stored document of a typed scope to its current schema
version, each with a write conditional on the version read.

Documents are read in batches as the store lists them; each outdated one is upgraded by the
scope's own migrations (what a turn loading it would do) and written back only if nobody
changed it meanwhile (a document that changed is read again, up to `ATTEMPTS` times). Every
document is done on its own, so an interrupted run is resumed by running it again: the
documents already migrated count as current.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from .. import AgentState, StateError, TurnIds, parse_key, unescape_segment
from ..backends import ConflictError, InvalidKeyError, Storage, StoreItem
from ._output import show
from ._store import CommandError, json_option, run_on_store

SCHEMA = "_schema"
"""Where a typed bucket stores its schema version (absent: version 1)."""
ATTEMPTS = 3
"""Reads of one document that keeps changing under the migration before it is refused."""
CONCURRENT_WRITES = 16


@dataclass
class Summary:
    """What a run did: counts, and each refused document with its reason."""

    dry_run: bool
    migrated: int = 0
    current: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "migrated": self.migrated,
            "already_current": self.current,
            "refused": [{"key": k, "reason": r} for k, r in sorted(self.refused.items())],
        }


@click.command("migrate")
@click.option(
    "--scope",
    "scope_path",
    required=True,
    metavar="MODULE:CLASS",
    help="The typed scope class, e.g. mybot.state:Profile (importable from here).",
)
@click.option("--prefix", default="", help="Only keys starting with this (e.g. a namespace/).")
@click.option("--batch", default=100, show_default=True, help="Documents read at a time.")
@click.option("--dry-run", is_flag=True, help="Count what would change; write nothing.")
@json_option
@click.pass_context
def command(
    ctx: click.Context, scope_path: str, prefix: str, batch: int, dry_run: bool, as_json: bool
) -> None:  # fmt: skip
    """Upgrade every stored document of a typed scope to its current schema version.

    Each write is conditional on the version read; run it again to resume an interrupted
    run. Exits 1 when a document was refused (the summary says why)."""
    cls = _scope_class(scope_path)
    if batch < 1:
        raise click.BadParameter("must be at least 1", param_hint="--batch")
    summary = Summary(dry_run)
    run_on_store(ctx, lambda storage: _migrate(storage, cls, prefix, batch, summary))
    show(summary.report(), as_json)
    if summary.refused:
        ctx.exit(1)


def _scope_class(path: str) -> type[AgentState]:
    """The class `MODULE:CLASS` names: a typed scope with a schema version."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise click.BadParameter(
            "give MODULE:CLASS, e.g. mybot.state:Profile", param_hint="--scope"
        )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a bot's own modules, as `python -m` would find them
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise CommandError(f"cannot load --scope {path}: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, AgentState)):
        raise CommandError(f"--scope {path} is not an AgentState subclass")
    if found.schema_version is None:
        raise CommandError(f"--scope {path} has no schema_version: nothing to migrate")
    return found


def belongs(cls: type[AgentState], key: str) -> bool:
    """Whether `key` is where `cls` stores some ids' state: the key scheme's ids, read from
    the key (with or without a namespace), give the same key back."""
    head = key.split("/", 1)[0]
    for namespace in (None, head):
        try:
            parsed = parse_key(key, namespace=None if namespace is None else unescape_segment(head))
            ids = TurnIds(parsed.channel, parsed.user, parsed.conversation, parsed.app,
                          parsed.namespace)  # fmt: skip
            if cls.key_for(ids) == key:
                return True
        except (InvalidKeyError, StateError):
            continue
    return False


async def _migrate(
    storage: Storage, cls: type[AgentState], prefix: str, batch: int, summary: Summary
) -> None:
    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    shown = console.is_terminal
    with Progress(*columns, console=console, transient=True, disable=not shown) as progress:
        task = progress.add_task("migrating", total=None)
        keys: list[str] = []
        async for key in storage.list(prefix):
            if belongs(cls, key):
                keys.append(key)
            if len(keys) == batch:
                await _migrate_batch(storage, cls, keys, summary)
                keys = []
                progress.update(task, description=_progress(summary))
        if keys:
            await _migrate_batch(storage, cls, keys, summary)
        progress.update(task, description=_progress(summary))


def _progress(summary: Summary) -> str:
    done = "would migrate" if summary.dry_run else "migrated"
    return (f"{done} {summary.migrated}, already current {summary.current}, "
            f"refused {len(summary.refused)}")  # fmt: skip


async def _migrate_batch(
    storage: Storage, cls: type[AgentState], keys: list[str], summary: Summary
) -> None:
    """Migrate the documents at `keys`: one read, then conditional writes of the outdated."""
    pending = keys
    for _ in range(ATTEMPTS):
        found = await storage.read(pending)
        writes: dict[str, StoreItem] = {}
        for key in pending:
            item = found.get(key)
            if item is None:
                continue  # deleted since listed: nothing to migrate
            upgraded = _upgrade(cls, key, item, summary)
            if upgraded is not None:
                writes[key] = upgraded
        if summary.dry_run:
            summary.migrated += len(writes)
            return
        pending = await _write_each(storage, writes, summary)
        if not pending:
            return
    for key in pending:
        summary.refused[key] = f"it kept changing during {ATTEMPTS} attempts; run again"


def _upgrade(
    cls: type[AgentState], key: str, item: StoreItem, summary: Summary
) -> StoreItem | None:
    """The write that brings `item` to the current version; None when there is none to do
    (current, or refused: the summary says which)."""
    version = item.value.get(SCHEMA, 1)
    if version == cls.schema_version:
        summary.current += 1
        return None
    try:  # the bucket runs the scope's migrations and validation, as a turn loading it would
        document = cls(key, StoreItem(item.value, item.etag)).document()
    except StateError as exc:
        summary.refused[key] = str(exc)
        return None
    return StoreItem(document, item.etag, ttl=cls.ttl)


async def _write_each(
    storage: Storage, writes: dict[str, StoreItem], summary: Summary
) -> list[str]:
    """Write each document on its own (conditionally), a few at a time; give the keys that
    changed meanwhile, to read again."""
    limit = asyncio.Semaphore(CONCURRENT_WRITES)
    changed: list[str] = []

    async def write(key: str, item: StoreItem) -> None:
        async with limit:
            try:
                await storage.write({key: item})
            except ConflictError:
                changed.append(key)
                return
            summary.migrated += 1

    await asyncio.gather(*(write(key, item) for key, item in writes.items()))
    return changed
