"""The emulator's data: databases, containers and their items in memory, with etags and TTL.

Items live per container in partitions (one dict per partition key value, by id). A
partition's items are replaced only as a whole by `Partition.commit`, so a transactional
batch can work on a copy and either commit it or drop it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_ITEM_BYTES = 2 * 1024 * 1024
"""Cosmos DB's item size limit: the UTF-8 length of the item's JSON, system fields included."""

SYSTEM_FIELDS = ("_rid", "_self", "_etag", "_attachments", "_ts")

_counter = itertools.count(1)


class CosmosFault(Exception):
    """A request the service refuses: HTTP status, Cosmos error code and message."""

    def __init__(self, status: int, code: str, message: str, substatus: int | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.substatus = substatus


def not_found(what: str) -> CosmosFault:
    return CosmosFault(404, "NotFound", f"{what} does not exist")


def bad_request(message: str) -> CosmosFault:
    return CosmosFault(400, "BadRequest", message)


def new_etag() -> str:
    """A fresh, never repeated etag in the service's quoted-GUID shape."""
    return f'"00000000-0000-0000-{next(_counter):04x}-{time.time_ns() & 0xFFFFFFFFFFFF:012x}"'


def new_rid() -> str:
    return f"rid{next(_counter)}"


def system_fields(etag: str, link: str) -> dict[str, Any]:
    return {
        "_rid": new_rid(),
        "_self": link,
        "_etag": etag,
        "_attachments": "attachments/",
        "_ts": int(time.time()),
    }


@dataclass(frozen=True, slots=True)
class Item:
    """A stored item: its body as returned (system fields included) and when it expires."""

    body: dict[str, Any]
    expires_at: float | None

    @property
    def etag(self) -> str:
        return str(self.body["_etag"])

    def live(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


@dataclass(slots=True)
class Partition:
    """The items of one partition key value, by id."""

    items: dict[str, Item] = field(default_factory=dict)

    def get(self, item_id: str, now: float) -> Item | None:
        item = self.items.get(item_id)
        return item if item is not None and item.live(now) else None

    def commit(self, items: dict[str, Item]) -> None:
        self.items = items


@dataclass(slots=True)
class Container:
    """A container: its properties (partition key path, `defaultTtl`) and its partitions."""

    properties: dict[str, Any]
    partitions: dict[str, Partition] = field(default_factory=dict)

    @property
    def pk_field(self) -> str:
        return str(self.properties["partitionKey"]["paths"][0]).lstrip("/")

    def partition(self, pk: str) -> Partition:
        return self.partitions.setdefault(pk, Partition())

    def live_items(self, now: float) -> list[dict[str, Any]]:
        return [
            item.body
            for partition in self.partitions.values()
            for item in partition.items.values()
            if item.live(now)
        ]

    def stored(self, body: dict[str, Any], link: str) -> Item:
        """Validate a new item body and give it fresh system fields and its expiry."""
        item_id = body.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise bad_request("the item needs a non-empty string 'id'")
        if any(char in item_id for char in "/\\?#") or len(item_id) > 255:
            raise bad_request("the item id holds '/', '\\', '?' or '#' or is over 255 chars")
        fields = {name: value for name, value in body.items() if name not in SYSTEM_FIELDS}
        fields.update(system_fields(new_etag(), f"{link}/docs/{item_id}/"))
        if len(orjson.dumps(fields)) > MAX_ITEM_BYTES:
            raise CosmosFault(413, "RequestEntityTooLarge", "the item is larger than 2 MB")
        return Item(fields, self._expiry(fields))

    def _expiry(self, body: dict[str, Any]) -> float | None:
        """Expiry as the service counts it: `ttl` seconds after `_ts` (whole seconds)."""
        default = self.properties.get("defaultTtl")
        ttl = body.get("ttl")
        if ttl is not None and (type(ttl) is not int or not (ttl == -1 or ttl > 0)):
            raise bad_request("'ttl' must be a positive integer or -1")
        if default is None:
            return None
        seconds = default if ttl is None else ttl
        return None if seconds == -1 else float(body["_ts"] + seconds)


@dataclass(slots=True)
class Database:
    properties: dict[str, Any]
    containers: dict[str, Container] = field(default_factory=dict)


@dataclass(slots=True)
class Throttle:
    """Injected throttling: the next `count` item requests (of one container, if named) get
    429 with `x-ms-retry-after-ms: retry_after_ms`."""

    count: int
    retry_after_ms: int
    scope: str | None

    def applies(self, link: str) -> bool:
        return self.count > 0 and (self.scope is None or self.scope == link)


@dataclass(slots=True)
class Account:
    """Everything the emulator holds, plus its test controls and request counters."""

    databases: dict[str, Database] = field(default_factory=dict)
    throttle: Throttle | None = None
    requests: int = 0
    item_requests: int = 0

    def database(self, db: str) -> Database:
        found = self.databases.get(db)
        if found is None:
            raise not_found(f"database {db!r}")
        return found

    def container(self, db: str, coll: str) -> Container:
        found = self.database(db).containers.get(coll)
        if found is None:
            raise not_found(f"container {coll!r} of database {db!r}")
        return found

    def take_throttle(self, link: str) -> int | None:
        """The retry-after (ms) if this item request is to be throttled, else None."""
        throttle = self.throttle
        if throttle is None or not throttle.applies(link):
            return None
        throttle.count -= 1
        return throttle.retry_after_ms
