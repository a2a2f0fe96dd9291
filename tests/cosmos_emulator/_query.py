"""The one query shape the emulator evaluates: the Cosmos backend's key-prefix listing.

`SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)` with a string `@prefix`. Any other
query is answered 400, so a backend that starts sending another shape fails loudly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._store import bad_request

PREFIX_QUERY = "SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)"


def evaluate(spec: object, items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The query's result documents (`{"key": ...}` per item whose string key matches)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("query"), str):
        raise bad_request("a query body is {'query': str, 'parameters': [...]}")
    if " ".join(spec["query"].split()) != PREFIX_QUERY:
        raise bad_request(f"the emulator evaluates only {PREFIX_QUERY!r}")
    parameters = spec.get("parameters") or []
    values = {p.get("name"): p.get("value") for p in parameters if isinstance(p, dict)}
    prefix = values.get("@prefix")
    if len(parameters) != 1 or not isinstance(prefix, str):
        raise bad_request("the prefix query takes one string parameter, @prefix")
    return [
        {"key": item["key"]}
        for item in items
        if isinstance(item.get("key"), str) and item["key"].startswith(prefix)
    ]
