"""How commands print: pretty JSON for people, compact JSON with `--json`, and sizes."""

from __future__ import annotations

from typing import Any

import click
import orjson
from rich.console import Console

from ..backends import StoreItem


def show(data: Any, as_json: bool) -> None:
    """Print `data` as compact JSON (`--json`) or pretty, highlighted on a terminal."""
    if as_json:
        click.echo(orjson.dumps(data).decode())
    else:
        Console(soft_wrap=True).print_json(data=data)


def size(item: StoreItem) -> int:
    """A document's size in bytes, as JSON."""
    return len(item.data) if item.data is not None else len(orjson.dumps(item.value))


def parse_document(text: str, where: str) -> dict[str, Any]:
    """A JSON object from `text`, or `click.BadParameter` naming `where` and the reason."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise click.BadParameter(f"{where} is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{where} must be a JSON object, not {type(value).__name__}")
    return value
