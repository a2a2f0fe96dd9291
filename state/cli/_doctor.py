"""`agent-state doctor`: can this URL's store be reached, with these credentials, and does it
hold documents this version reads?"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from urllib.parse import urlsplit

import click

from .. import open_storage
from ..backends import Storage, StorageError, StoreItem
from ._output import show
from ._store import CommandError, Options, json_option

PROBE_PREFIX = "agent-state-doctor"
"""Where `--write-probe` writes (and deletes) its document."""


class Checks:
    """The checks run so far: each a name, whether it passed, and what was found."""

    def __init__(self) -> None:
        self.results: list[dict[str, object]] = []

    async def run(self, name: str, check: Callable[[], Awaitable[str]]) -> bool:
        try:
            detail, ok = await check(), True
        except StorageError as exc:
            detail, ok = " ".join(str(exc).split()), False
        self.results.append({"check": name, "ok": ok, "detail": detail})
        return ok


@click.command("doctor")
@click.option("--sample", default=20, show_default=True, help="Documents whose format is read.")
@click.option(
    "--write-probe",
    is_flag=True,
    help=f"Also write and delete a document under {PROBE_PREFIX}/ (write access).",
)
@json_option
@click.pass_context
def command(ctx: click.Context, sample: int, write_probe: bool, as_json: bool) -> None:  # fmt: skip
    """Check the store: its URL, connectivity and credentials, the container or database,
    and the stored format of a sample of documents. Exits 1 when a check fails."""
    options = ctx.find_object(Options)
    url = options.store if options is not None else None
    if not url:
        raise CommandError("no store given: pass --store URL or set AGENT_STATE_URL")
    checks = Checks()
    asyncio.run(_diagnose(url, sample, write_probe, checks))
    if as_json:
        show({"store": _redacted(url), "checks": checks.results}, True)
    else:
        click.echo(f"store: {_redacted(url)}")
        for result in checks.results:
            mark = "ok  " if result["ok"] else "FAIL"
            click.echo(f"{mark} {result['check']}: {result['detail']}")
    if not all(result["ok"] for result in checks.results):
        ctx.exit(1)


async def _diagnose(url: str, sample: int, write_probe: bool, checks: Checks) -> None:
    opened: list[Storage] = []

    async def configuration() -> str:
        try:
            opened.append(open_storage(url))
        except ImportError as exc:
            raise CommandError(
                f"this store needs {exc.name}: pip install -e '.[all]' in the agent-state clone"
            ) from None
        return f"{type(opened[0]).__name__} configured"

    if not await checks.run("configuration", configuration):
        return
    async with opened[0] as storage:
        keys: list[str] = []

        async def connect() -> str:
            await storage.read([f"{PROBE_PREFIX}/absent"])  # a round trip with the credentials
            async for key in storage.list(""):
                keys.append(key)
                if len(keys) == sample:
                    break
            listed = f"{len(keys)} key(s) listed" + (" (sample)" if len(keys) == sample else "")
            return f"reached, credentials and container/database accepted; {listed}"

        if not await checks.run("connectivity", connect):
            return
        for key in keys:
            await checks.run(f"format of {key}", partial(_read_format, storage, key))
        if write_probe:
            await checks.run("write access", lambda: _probe(storage))


async def _read_format(storage: Storage, key: str) -> str:
    item = (await storage.read([key])).get(key)
    return "expired meanwhile" if item is None else f"readable, version {item.etag}"


async def _probe(storage: Storage) -> str:
    key = f"{PROBE_PREFIX}/{uuid.uuid4().hex}"
    etag = (await storage.write({key: StoreItem({"probe": True}, None)}))[key]
    await storage.delete([key], if_match={key: etag})
    return f"wrote and deleted {key}"


def _redacted(url: str) -> str:
    """The URL without credentials or query (it may carry keys)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
