"""Item operations with the service's preconditions, on one partition's items.

Each operation works on a plain dict of id -> Item: the live partition for a single
request, a copy of it for a transactional batch (committed only if every operation
succeeded). Statuses follow the service: 201 created, 200 replaced or read, 204 deleted,
404 missing, 409 exists, 412 stale `If-Match`.
"""

from __future__ import annotations

from typing import Any

from ._store import Container, CosmosFault, Item, bad_request, not_found

OPERATIONS = ("Create", "Upsert", "Replace", "Delete", "Read")


def precondition_failed() -> CosmosFault:
    return CosmosFault(
        412,
        "PreconditionFailed",
        "Operation cannot be performed because one of the specified precondition is not met.",
    )


def conflict(item_id: str) -> CosmosFault:
    return CosmosFault(409, "Conflict", f"Entity with the specified id {item_id!r} already exists")


def apply(
    container: Container,
    items: dict[str, Item],
    operation: str,
    item_id: str | None,
    body: dict[str, Any] | None,
    *,
    if_match: str | None,
    pk: list[Any],
    now: float,
    link: str,
) -> tuple[int, Item | None]:
    """Run one operation on `items`; return its status and the item it leaves or read."""
    if operation in ("Create", "Upsert", "Replace"):
        if body is None:
            raise bad_request(f"{operation} needs an item body")
        if [body.get(container.pk_field)] != pk:
            raise bad_request(
                "PartitionKey extracted from document doesn't match the one specified in the header"
            )
        if operation == "Replace" and body.get("id") != item_id:
            raise bad_request("the item body's id differs from the id being replaced")
        item_id = body.get("id")
    if not isinstance(item_id, str):
        raise bad_request(f"{operation} needs an item id")
    current = items.get(item_id)
    if current is not None and not current.live(now):
        del items[item_id]
        current = None
    if operation == "Read":
        if current is None:
            raise not_found(f"item {item_id!r}")
        return 200, current
    if operation == "Create" and current is not None:
        raise conflict(item_id)
    if operation in ("Replace", "Delete") and current is None:
        raise not_found(f"item {item_id!r}")
    if if_match is not None and (current is None or current.etag != if_match):
        raise precondition_failed()
    if operation == "Delete":
        del items[item_id]
        return 204, None
    assert body is not None
    stored = container.stored(body, link)
    items[item_id] = stored
    return (201 if current is None else 200), stored
