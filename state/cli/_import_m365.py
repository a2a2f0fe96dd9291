"""`agent-state import-m365`: move the documents the Microsoft 365 Agents SDK's BlobStorage or
CosmosDBStorage wrote into the store (the bridges' data mover), re-runnable."""

from __future__ import annotations

import os
from typing import Any

import click

from ..backends import Storage
from ..bridges.m365 import ImportReport, import_m365_blobs, import_m365_cosmos
from ._progress import counting
from ._store import CommandError, run_on_store


@click.command("import-m365")
@click.option("--blob-container", metavar="NAME", help="Read the blobs of this container...")
@click.option(
    "--connection-string-env",
    metavar="VAR",
    default="AZURE_STORAGE_CONNECTION_STRING",
    show_default=True,
    help="...with the connection string in this variable.",
)
@click.option("--prefix", default="", help="Only the blobs whose name starts with this.")
@click.option("--cosmos-container", metavar="DATABASE/CONTAINER", help="Or read these items...")
@click.option("--cosmos-endpoint", metavar="URL", help="...of the account at this endpoint...")
@click.option("--cosmos-key-env", metavar="VAR", default="AZURE_COSMOS_KEY", show_default=True,
              help="...with its key in this variable.")  # fmt: skip
@click.option("--namespace", help="The namespace the bot's keys are under, if any.")
@click.pass_context
def command(
    ctx: click.Context,
    blob_container: str | None,
    connection_string_env: str,
    prefix: str,
    cosmos_container: str | None,
    cosmos_endpoint: str | None,
    cosmos_key_env: str,
    namespace: str | None,
) -> None:
    """Copy what M365's BlobStorage (--blob-container) or CosmosDBStorage (--cosmos-container)
    wrote into the store; a key the store already holds is never overwritten, so it can run
    again. Prints what moved, what was there already, and what was refused and why."""
    if (blob_container is None) == (cosmos_container is None):
        raise click.UsageError("give one source: --blob-container or --cosmos-container")

    async def move(storage: Storage) -> ImportReport:
        if blob_container is not None:
            return await _from_blobs(storage, blob_container, connection_string_env, prefix,
                                     namespace)  # fmt: skip
        assert cosmos_container is not None
        return await _from_cosmos(storage, cosmos_container, cosmos_endpoint, cosmos_key_env,
                                  namespace)  # fmt: skip

    with counting("importing"):
        report = run_on_store(ctx, move)
    differing, refused = len(report.differing), len(report.refused)
    click.echo(f"moved {report.moved}, already there {report.unchanged}, "
               f"differing (kept) {differing}, refused {refused}")  # fmt: skip
    for key, reason in sorted(report.refused.items()):
        click.echo(f"refused {key}: {reason}", err=True)
    if not report.complete:
        ctx.exit(1)


def _secret(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise CommandError(f"${variable} is not set: it must hold the {what}")
    return value


async def _from_blobs(
    storage: Storage, name: str, variable: str, prefix: str, namespace: str | None
) -> ImportReport:
    from azure.storage.blob.aio import ContainerClient

    connection = _secret(variable, "Blob connection string")
    async with ContainerClient.from_connection_string(connection, name) as container:
        return await import_m365_blobs(container, storage, namespace=namespace, prefix=prefix)


async def _from_cosmos(
    storage: Storage, names: str, endpoint: str | None, variable: str, namespace: str | None
) -> ImportReport:
    from azure.cosmos.aio import CosmosClient

    database, _, container_id = names.partition("/")
    if not (database and container_id and endpoint):
        raise CommandError("--cosmos-container DATABASE/CONTAINER needs --cosmos-endpoint URL")
    key = _secret(variable, "Cosmos DB account key")
    client: Any
    async with CosmosClient(endpoint, credential=key) as client:
        container = client.get_database_client(database).get_container_client(container_id)
        return await import_m365_cosmos(container, storage, namespace=namespace)
