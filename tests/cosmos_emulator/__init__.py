"""A small Azure Cosmos DB emulator speaking the REST protocol, for the backend's tests.

No Cosmos emulator can be installed on these machines, so the tests run the real
`azure-cosmos` SDK over HTTP against this one. It covers what `CosmosStorage` uses and
what BACKENDS.md lists, and refuses the rest:

- `GET /` (account, advertising its own address), databases (`POST /dbs`,
  `GET|DELETE /dbs/{db}`), containers (`POST /dbs/{db}/colls`, `GET|DELETE .../colls/{c}`),
  items (`POST .../docs` create, upsert with `x-ms-documentdb-is-upsert`, the prefix query
  with `x-ms-documentdb-isquery`, a transactional batch with `x-ms-cosmos-is-batch-request`;
  the read feed `GET .../docs`; `GET|PUT|DELETE .../docs/{id}`), with or without a trailing slash.
- Items in memory per container and partition key value (`x-ms-documentdb-partitionkey`),
  with `_etag` / `_rid` / `_ts`; `If-Match` (412), `If-None-Match` on reads (304), 404, 409,
  413 over 2 MB; per-item `ttl` when the container's `defaultTtl` is -1, counted from `_ts`
  in whole seconds as the service does (expired items are gone for every request).
- The one query `SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)` (others: 400).
- Transactional batches: 200, or 207 with the failing operation's status and 424 for the
  others, nothing applied.
- Master-key signatures (HMAC-SHA256) checked on every request: a wrong key gets 401.

Test controls (no signature): `POST /_emulator/throttle` with
`{"count": N, "retry_after_ms": M, "database"?: db, "container"?: c}` makes the next N item
requests (of that container, or of any) answer 429 with `x-ms-retry-after-ms: M`;
`GET /_emulator/stats` gives `{"requests": ..., "item_requests": ...}` served so far.

Run it with `python -m tests.cosmos_emulator --port 8081`, or in a test with
`async with running() as endpoint:` (a fresh emulator on a free port, stopped on exit).
"""

from ._auth import MASTER_KEY
from ._routes import create_app
from ._server import running, serve

__all__ = ["MASTER_KEY", "create_app", "running", "serve"]
