"""`agent-state inspect`: the documents of a key, a user, a conversation or a session."""

from __future__ import annotations

from typing import Any

import click

from .. import conversation_key, session_key, user_key
from ..backends import Storage
from ._output import show, size
from ._store import CommandError, json_option, run_on_store

READ_BATCH = 100
"""Keys per storage read."""


@click.command("inspect")
@click.argument("key", required=False)
@click.option("--channel", help="The channel id (with --user and/or --conversation).")
@click.option("--user", help="A user id: the user's state, or with --conversation a session.")
@click.option("--conversation", help="A conversation id: the conversation and its sessions.")
@click.option("--namespace", help="The namespace the bot uses, if any.")
@click.option("--limit", default=100, show_default=True, help="Most documents shown.")
@json_option
@click.pass_context
def command(
    ctx: click.Context,
    key: str | None,
    channel: str | None,
    user: str | None,
    conversation: str | None,
    namespace: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Show the document at KEY (or the ids' key) and the documents under it: their
    versions, sizes and contents."""
    target = key if key is not None else _key_of(channel, user, conversation, namespace)
    if key is not None and (channel or user or conversation):
        raise click.UsageError("give a KEY or ids (--channel ...), not both")
    if limit < 1:
        raise click.BadParameter("must be at least 1", param_hint="--limit")
    show(run_on_store(ctx, lambda storage: _inspect(storage, target, limit)), as_json)


def _key_of(
    channel: str | None, user: str | None, conversation: str | None, namespace: str | None
) -> str:
    """The key the ids name: a session (both), a conversation, or a user."""
    if not channel or not (user or conversation):
        raise click.UsageError("give a KEY, or --channel with --user and/or --conversation")
    if user and conversation:
        return session_key(channel, conversation, user, namespace=namespace)
    if conversation:
        return conversation_key(channel, conversation, namespace=namespace)
    assert user is not None
    return user_key(channel, user, namespace=namespace)


async def _inspect(storage: Storage, key: str, limit: int) -> dict[str, Any]:
    """The document at `key` and up to `limit - 1` documents under it."""
    keys = [key]
    async for found in storage.list(key + "/"):
        if len(keys) == limit:
            break
        keys.append(found)
    documents = []
    for start in range(0, len(keys), READ_BATCH):
        batch = sorted(keys[start : start + READ_BATCH])
        items = await storage.read(batch)
        for name in batch:
            item = items.get(name)
            if item is None:
                continue
            entry: dict[str, Any] = {"key": name, "version": item.etag, "bytes": size(item)}
            if item.ttl is not None:
                entry["ttl"] = item.ttl
            if isinstance(item.value.get("_schema"), int):
                entry["schema_version"] = item.value["_schema"]
            entry["document"] = item.value
            documents.append(entry)
    if not documents:
        raise CommandError(f"nothing is stored at {key!r} (nor under it)")
    return {"key": key, "documents": documents, "complete": len(keys) < limit}
