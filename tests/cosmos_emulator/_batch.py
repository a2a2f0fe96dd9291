"""Transactional batch: every operation on a copy of the partition, committed only if all pass.

Answers 200 with each operation's result, or 207 with the failing operation's status and
424 (failed dependency) for all the others, leaving the partition untouched, as the service does.
"""

from __future__ import annotations

from typing import Any

from ._items import OPERATIONS, apply
from ._store import Container, CosmosFault, Item, Partition, bad_request

MAX_OPERATIONS = 100


def run_batch(
    container: Container,
    partition: Partition,
    operations: object,
    *,
    pk: list[Any],
    now: float,
    link: str,
) -> tuple[int, list[dict[str, Any]]]:
    """Apply `operations` (the request body) all-or-nothing; return the status and results."""
    if not isinstance(operations, list) or not 0 < len(operations) <= MAX_OPERATIONS:
        raise bad_request(f"a batch holds 1 to {MAX_OPERATIONS} operations")
    staged = dict(partition.items)
    results: list[dict[str, Any]] = []
    for index, operation in enumerate(operations):
        try:
            status, item = _apply_one(container, staged, operation, pk=pk, now=now, link=link)
        except CosmosFault as fault:
            failed = [{"statusCode": 424, "requestCharge": 0.0} for _ in operations]
            failed[index] = {"statusCode": fault.status, "requestCharge": 1.0}
            if fault.substatus is not None:
                failed[index]["subStatusCode"] = fault.substatus
            return 207, failed
        results.append(_result(status, item))
    partition.commit(staged)
    return 200, results


def _apply_one(
    container: Container,
    items: dict[str, Item],
    operation: object,
    *,
    pk: list[Any],
    now: float,
    link: str,
) -> tuple[int, Item | None]:
    if not isinstance(operation, dict) or operation.get("operationType") not in OPERATIONS:
        raise bad_request(f"unknown batch operation {operation!r:.80}")
    body = operation.get("resourceBody")
    if body is not None and not isinstance(body, dict):
        raise bad_request("a batch operation's resourceBody must be an object")
    if_match = operation.get("ifMatch")
    return apply(
        container,
        items,
        operation["operationType"],
        operation.get("id"),
        body,
        if_match=if_match if isinstance(if_match, str) else None,
        pk=pk,
        now=now,
        link=link,
    )


def _result(status: int, item: Item | None) -> dict[str, Any]:
    result: dict[str, Any] = {"statusCode": status, "requestCharge": 1.0}
    if item is not None:
        result["eTag"] = item.etag
        result["resourceBody"] = item.body
    return result
