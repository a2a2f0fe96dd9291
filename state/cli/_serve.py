"""`agent-state serve --inspect`: the development state inspector on this machine's loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import click

from ._store import CommandError, open_store


@click.command()
@click.option("--inspect", is_flag=True, help="Serve the state inspector (required: it edits).")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option("--port", default=8300, show_default=True, help="The port to listen on.")
@click.option("--namespace", help="The namespace the bots use, if any.")
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host and remote clients (no authentication: never in production).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    inspect: bool,
    host: str,
    port: int,
    namespace: str | None,
    allow_remote: bool,
) -> None:
    """Serve the state inspector: browse and edit the store's documents in a browser
    (development use: no authentication, loopback only unless --allow-remote)."""
    if not inspect:
        raise click.UsageError("the inspector is served only when asked: pass --inspect")
    try:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount

        from ..inspect import InspectorConfigError, check_bind_host, inspector_app
    except ImportError as exc:
        raise CommandError(
            f"serve --inspect needs {exc.name}: pip install -e '.[inspect]' in the clone"
        ) from None
    try:
        check_bind_host(host, allow_remote=allow_remote)
    except InspectorConfigError as exc:
        raise click.UsageError(str(exc)) from None
    storage = open_store(ctx)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with storage:
            yield

    inner = inspector_app(storage, namespace=namespace, allow_remote=allow_remote)
    app = Starlette(routes=[Mount("/", inner)], lifespan=lifespan)
    click.echo(f"agent-state inspector: http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


command = serve
