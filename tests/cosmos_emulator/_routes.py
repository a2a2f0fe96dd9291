"""The HTTP surface: Cosmos DB REST routes for account, databases, containers and items.

One catch-all handler splits the (decoded) path into segments, so paths with and without
a trailing slash are alike; it checks the signature, then dispatches on the shape of the
path. Test controls live under `/_emulator/` (no signature needed).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from ._auth import MASTER_KEY, verify
from ._batch import run_batch
from ._items import apply, conflict
from ._query import evaluate
from ._store import (
    MAX_ITEM_BYTES,
    Account,
    Container,
    CosmosFault,
    Database,
    Throttle,
    bad_request,
    new_rid,
    system_fields,
)

ACCOUNT = web.AppKey("account", Account)
KEY = web.AppKey("key", str)
_DEFAULT_PAGE = 100


def create_app(key: str = MASTER_KEY) -> web.Application:
    """The emulator as an aiohttp application with an empty account, signed with `key`."""
    app = web.Application(client_max_size=4 * MAX_ITEM_BYTES)
    app[ACCOUNT] = Account()
    app[KEY] = key
    app.router.add_route("*", "/{tail:.*}", _handle)
    return app


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers={"x-ms-request-charge": "1", **(headers or {})},
    )


def _fault(fault: CosmosFault, retry_after_ms: int | None = None) -> web.Response:
    headers = {}
    if fault.substatus is not None:
        headers["x-ms-substatus"] = str(fault.substatus)
    if retry_after_ms is not None:
        headers["x-ms-retry-after-ms"] = str(retry_after_ms)
    return _json(fault.status, {"code": fault.code, "message": fault.message}, headers)


async def _handle(request: web.Request) -> web.StreamResponse:
    account = request.app[ACCOUNT]
    segments = [segment for segment in request.path.split("/") if segment]
    if segments[:1] == ["_emulator"]:
        return await _control(request, account, segments[1:])
    account.requests += 1
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        verify(request.app[KEY], request.method, segments, headers)
        body = await request.read()
        payload = orjson.loads(body) if body else None
        return _dispatch(request, account, segments, headers, payload, len(body))
    except orjson.JSONDecodeError:
        return _fault(bad_request("the request body is not JSON"))
    except CosmosFault as fault:
        return _fault(fault)


def _dispatch(
    request: web.Request,
    account: Account,
    segments: list[str],
    headers: dict[str, str],
    payload: Any,
    size: int,
) -> web.StreamResponse:
    verb, depth = request.method, len(segments)
    if depth == 0 and verb == "GET":
        return _json(200, _account_document(request))
    if segments[0] != "dbs" or (depth > 2 and segments[2] != "colls"):
        raise CosmosFault(404, "NotFound", f"no such resource {request.path!r}")
    if depth == 1 and verb == "POST":
        return _create_database(account, payload)
    if depth == 2 and verb in ("GET", "DELETE"):
        return _database(account, segments[1], delete=verb == "DELETE")
    if depth == 3 and verb == "POST":
        return _create_container(account.database(segments[1]), segments[1], payload)
    if depth == 4 and verb in ("GET", "DELETE"):
        return _container(account, segments[1], segments[3], delete=verb == "DELETE")
    if depth in (5, 6) and segments[4] == "docs":
        link = "/".join(segments[:4])
        retry_after = account.take_throttle(link)
        account.item_requests += 1
        if retry_after is not None:
            fault = CosmosFault(429, "TooManyRequests", "Request rate is large", 3200)
            return _fault(fault, retry_after)
        container = _owner(account, segments[1], segments[3])
        if depth == 5 and verb == "POST":
            return _post_docs(container, link, headers, payload, size)
        if depth == 5 and verb == "GET":  # the read feed (`read_all_items`)
            return _page(container, container.live_items(time.time()), headers)
        if depth == 6 and verb in ("GET", "PUT", "DELETE"):
            return _item(container, link, segments[5], verb, headers, payload)
    raise CosmosFault(405, "MethodNotAllowed", f"{verb} {request.path} is not supported")


def _owner(account: Account, db: str, coll: str) -> Container:
    """The container of an item request; a missing one is 404 with sub-status 1003."""
    try:
        return account.container(db, coll)
    except CosmosFault as fault:
        raise CosmosFault(fault.status, fault.code, fault.message, 1003) from fault


def _account_document(request: web.Request) -> dict[str, Any]:
    here = [{"name": "Emulator", "databaseAccountEndpoint": f"http://{request.host}/"}]
    return {
        "id": "emulator",
        "_rid": "emulator",
        "_self": "",
        "writableLocations": here,
        "readableLocations": here,
        "enableMultipleWriteLocations": False,
        "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
    }


def _create_database(account: Account, payload: Any) -> web.Response:
    db = payload.get("id") if isinstance(payload, dict) else None
    if not isinstance(db, str) or not db:
        raise bad_request("a database needs an id")
    if db in account.databases:
        raise conflict(db)
    properties = {"id": db, **system_fields(f'"{new_rid()}"', f"dbs/{db}/")}
    account.databases[db] = Database(properties)
    return _json(201, properties)


def _database(account: Account, db: str, *, delete: bool) -> web.Response:
    found = account.database(db)
    if delete:
        del account.databases[db]
        return web.Response(status=204)
    return _json(200, found.properties)


def _create_container(database: Database, db: str, payload: Any) -> web.Response:
    coll = payload.get("id") if isinstance(payload, dict) else None
    if not isinstance(coll, str) or not coll:
        raise bad_request("a container needs an id")
    paths = (payload.get("partitionKey") or {}).get("paths")
    if not (isinstance(paths, list) and len(paths) == 1 and isinstance(paths[0], str)):
        raise bad_request("a container needs a partitionKey with one path")
    if coll in database.containers:
        raise conflict(coll)
    properties = {**payload, **system_fields(f'"{new_rid()}"', f"dbs/{db}/colls/{coll}/")}
    database.containers[coll] = Container(properties)
    return _json(201, properties)


def _container(account: Account, db: str, coll: str, *, delete: bool) -> web.Response:
    found = account.container(db, coll)
    if delete:
        del account.database(db).containers[coll]
        return web.Response(status=204)
    return _json(200, found.properties)


def _partition_key(headers: dict[str, str]) -> list[Any]:
    raw = headers.get("x-ms-documentdb-partitionkey")
    if raw is None:
        raise bad_request("the request carries no x-ms-documentdb-partitionkey header")
    try:
        pk = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"bad partition key header {raw!r}") from exc
    if not isinstance(pk, list) or len(pk) != 1:
        raise bad_request("the partition key header must be a one-element JSON array")
    return pk


def _flag(headers: dict[str, str], name: str) -> bool:
    return headers.get(name, "").lower() == "true"


def _post_docs(
    container: Container, link: str, headers: dict[str, str], payload: Any, size: int
) -> web.Response:
    now = time.time()
    if _flag(headers, "x-ms-documentdb-isquery"):
        return _query(container, headers, payload, now)
    if size > MAX_ITEM_BYTES:
        raise CosmosFault(413, "RequestEntityTooLarge", "the request is larger than 2 MB")
    pk = _partition_key(headers)
    partition = container.partition(orjson.dumps(pk).decode())
    if _flag(headers, "x-ms-cosmos-is-batch-request"):
        status, results = run_batch(container, partition, payload, pk=pk, now=now, link=link)
        return _json(status, results)
    if not isinstance(payload, dict):
        raise bad_request("an item must be a JSON object")
    operation = "Upsert" if _flag(headers, "x-ms-documentdb-is-upsert") else "Create"
    status, item = apply(
        container,
        partition.items,
        operation,
        None,
        payload,
        if_match=headers.get("if-match"),
        pk=pk,
        now=now,
        link=link,
    )
    assert item is not None
    return _json(status, item.body, {"etag": item.etag})


def _item(
    container: Container,
    link: str,
    item_id: str,
    verb: str,
    headers: dict[str, str],
    payload: Any,
) -> web.Response:
    pk = _partition_key(headers)
    partition = container.partition(orjson.dumps(pk).decode())
    operation = {"GET": "Read", "PUT": "Replace", "DELETE": "Delete"}[verb]
    if operation == "Replace" and not isinstance(payload, dict):
        raise bad_request("an item must be a JSON object")
    status, item = apply(
        container,
        partition.items,
        operation,
        item_id,
        payload,
        if_match=headers.get("if-match"),
        pk=pk,
        now=time.time(),
        link=link,
    )
    if item is None:
        return web.Response(status=status)
    if operation == "Read" and headers.get("if-none-match") == item.etag:
        return web.Response(status=304, headers={"etag": item.etag})
    return _json(status, item.body, {"etag": item.etag})


def _query(container: Container, headers: dict[str, str], payload: Any, now: float) -> web.Response:
    if "x-ms-documentdb-partitionkey" in headers:
        partition = container.partition(orjson.dumps(_partition_key(headers)).decode())
        items = [item.body for item in partition.items.values() if item.live(now)]
    else:
        items = container.live_items(now)
    return _page(container, evaluate(payload, items), headers)


def _page(container: Container, documents: list[Any], headers: dict[str, str]) -> web.Response:
    """One page of a query's or the read feed's documents, from `x-ms-continuation` on."""
    start = int(headers.get("x-ms-continuation") or 0)
    page = int(headers.get("x-ms-max-item-count") or _DEFAULT_PAGE)
    page = _DEFAULT_PAGE if page <= 0 else page
    chunk = documents[start : start + page]
    more = {"x-ms-continuation": str(start + page)} if start + page < len(documents) else {}
    body = {"_rid": container.properties["_rid"], "Documents": chunk, "_count": len(chunk)}
    return _json(200, body, more)


async def _control(request: web.Request, account: Account, segments: list[str]) -> web.Response:
    """Test controls: `POST /_emulator/throttle`, `GET /_emulator/stats`."""
    if segments == ["throttle"] and request.method == "POST":
        spec = await request.json()
        db, coll = spec.get("database"), spec.get("container")
        scope = f"dbs/{db}/colls/{coll}" if db and coll else None
        account.throttle = Throttle(int(spec["count"]), int(spec["retry_after_ms"]), scope)
        return web.Response(status=204)
    if segments == ["stats"] and request.method == "GET":
        return _json(200, {"requests": account.requests, "item_requests": account.item_requests})
    return _json(404, {"code": "NotFound", "message": "unknown emulator control"})
