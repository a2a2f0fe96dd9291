"""The inspector's routes: a listing, a document, and its conditional edit."""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import parse_qs, quote

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import ParsedKey
from ..backends import (
    ConflictError,
    FormatError,
    InvalidKeyError,
    InvalidValueError,
    StateTooLargeError,
    Storage,
    StorageError,
    StorageUnavailableError,
    StoreItem,
)
from ._browse import VIEWS, Page, Row, page, parsed
from ._guard import host_of, is_loopback
from ._html import CSP, esc, href, layout

PAGE_SIZE = 50
"""Keys per listed page (the most a request asks of the store's listing)."""

MAX_FORM_BYTES = 4 * 1024 * 1024
"""The largest edit accepted: bigger than any backend's document limit, and bounded."""

_FIELDS = ("channel", "user", "conversation", "app")


def inspector_app(
    storage: Storage,
    *,
    namespace: str | None = None,
    allow_remote: bool = False,
    page_size: int = PAGE_SIZE,
) -> ASGIApp:
    """The inspector over `storage` (keys under `namespace` if the bots use one). Requests
    from other machines, or naming a non-loopback host, are refused unless `allow_remote`."""
    pages = _Pages(storage, namespace, page_size, secrets.token_urlsafe(24))
    app = Starlette(
        routes=[
            Route("/", pages.listing),
            Route("/doc", pages.document, methods=["GET"]),
            Route("/doc", pages.edit, methods=["POST"]),
        ],
        exception_handlers={StorageError: _storage_error},
    )
    return app if allow_remote else _LoopbackOnly(app)


class _LoopbackOnly:
    """Answers clients on this machine, reached by a loopback name (no DNS rebinding)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            host = host_of(Request(scope).headers.get("host", ""))
            if client is None or not is_loopback(client[0]) or not is_loopback(host):
                response = _page(403, "Refused", _notice("error", _REMOTE_REFUSED))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


_REMOTE_REFUSED = (
    "The inspector answers this machine only (a loopback client and host name); "
    "it was not started with --allow-remote."
)


class _Pages:
    """The route handlers, over one storage; `token` guards the edit form."""

    def __init__(self, storage: Storage, namespace: str | None, size: int, token: str) -> None:
        self.storage = storage
        self.namespace = namespace
        self.size = size
        self.token = token

    async def listing(self, request: Request) -> Response:
        view = request.query_params.get("view", "all")
        if view not in VIEWS:
            return _page(400, "Bad request", _notice("error", f"unknown view {view!r}"))
        prefix = request.query_params.get("prefix", "")
        after = request.query_params.get("after")
        found = await page(
            self.storage,
            prefix=prefix,
            view=view,
            after=after,
            limit=self.size,
            namespace=self.namespace,
        )
        form = (
            f'<form class="filter" method="get" action="/"><input type="hidden" name="view" '
            f'value="{esc(view)}"><input name="prefix" size="50" placeholder="key prefix" '
            f'value="{esc(prefix)}"><button>Filter</button></form>'
        )
        next_link = href("/", view=view, prefix=prefix or None, after=found.next_after)
        following = (
            f'<p><a id="next" href="{next_link}">Next page</a></p>'
            if found.next_after is not None
            else ""
        )
        body = form + _rows_table(found.rows) + following
        return _page(200, VIEWS[view][0], body)

    async def document(self, request: Request) -> Response:
        key = request.query_params.get("key", "")
        item = (await self.storage.read([key])).get(key)
        if item is None:
            return _page(404, "Not found", _notice("error", f"no document at {key!r}"))
        notice = _notice("ok", "Saved.") if request.query_params.get("saved") else ""
        under = await page(
            self.storage,
            prefix=key + "/",
            view="all",
            after=request.query_params.get("after"),
            limit=self.size,
            namespace=self.namespace,
        )
        body = notice + self._document_body(key, item, _pretty(item.value), under)
        return _page(200, "Document", body)

    async def edit(self, request: Request) -> Response:
        form = await _form(request)
        if isinstance(form, Response):
            return form
        if not secrets.compare_digest(form.get("token", ""), self.token):
            return _page(403, "Refused", _notice("error", "the form is not this inspector's"))
        key, text = form.get("key", ""), form.get("document", "")
        version = form.get("version") or None  # empty: the document did not exist
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return await self._refused(422, key, text, f"not JSON: {exc}")
        if not isinstance(value, dict):
            return await self._refused(422, key, text, "a document is a JSON object")
        try:
            await self.storage.write({key: StoreItem(value, etag=version)})
        except ConflictError:
            return await self._refused(
                409, key, text, "someone changed this document since you opened it: "
                "nothing was saved; the stored version is shown, your edit is below"
            )  # fmt: skip
        except (InvalidValueError, StateTooLargeError) as exc:
            return await self._refused(422, key, text, str(exc))
        return RedirectResponse(f"/doc?key={quote(key, safe='')}&saved=1", status_code=303)

    async def _refused(self, status: int, key: str, text: str, reason: str) -> Response:
        """The document as stored now, with the user's text kept in the edit form."""
        item = (await self.storage.read([key])).get(key)
        shown = item if item is not None else StoreItem({}, etag=None)
        under = await page(
            self.storage,
            prefix=key + "/",
            view="all",
            after=None,
            limit=self.size,
            namespace=self.namespace,
        )
        body = _notice("error", reason) + self._document_body(key, shown, text, under)
        return _page(status, "Not saved", body)

    def _document_body(self, key: str, item: StoreItem, text: str, under: Page) -> str:
        size = len(item.data) if item.data is not None else len(orjson.dumps(item.value))
        ttl = "none (lives for good)" if item.ttl is None else f"{item.ttl:.0f} s left"
        info = parsed(key, self.namespace)
        facts = [("key", key), ("version", item.etag or "(absent)"), ("size", f"{size} bytes")]
        facts += [("ttl", ttl), *_ids(info)]
        listing = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in facts)
        more = (
            f'<p><a href="{href("/doc", key=key, after=under.next_after)}">Next page</a></p>'
            if under.next_after is not None
            else ""
        )
        below = f"<h2>Under this key</h2>{_rows_table(under.rows)}{more}" if under.rows else ""
        return (
            f"<dl>{listing}</dl><h2>Stored JSON</h2>"
            f'<pre id="stored">{esc(_pretty(item.value))}</pre>'
            f'<h2>Edit</h2><form method="post" action="/doc">'
            f'<input type="hidden" name="key" value="{esc(key)}">'
            f'<input type="hidden" name="version" value="{esc(item.etag or "")}">'
            f'<input type="hidden" name="token" value="{esc(self.token)}">'
            f'<textarea name="document" rows="16">{esc(text)}</textarea>'
            f"<p><button>Save if unchanged</button></p></form>{below}"
        )


def _ids(info: ParsedKey | None) -> list[tuple[str, str]]:
    if info is None:
        return [("scope", "(not a key of the agent-state scheme)")]
    ids = [("scope", info.scope), ("kind", info.kind)]
    ids += [(name, value) for name in _FIELDS if (value := getattr(info, name)) is not None]
    return ids + ([("record", info.record)] if info.record is not None else [])


def _rows_table(rows: list[Row]) -> str:
    if not rows:
        return "<p>No keys.</p>"
    head = "".join(f"<th>{name}</th>" for name in ("key", "scope", "kind", *_FIELDS))
    body = ""
    for row in rows:
        info = row.parsed
        cells = [info.scope, info.kind] if info is not None else ["(other)", ""]
        cells += [(getattr(info, name) or "") if info is not None else "" for name in _FIELDS]
        body += (
            f'<tr><td class="key"><a href="{href("/doc", key=row.key)}">{esc(row.key)}</a></td>'
            + "".join(f"<td>{esc(cell)}</td>" for cell in cells)
            + "</tr>"
        )
    return f'<table id="keys"><tr>{head}</tr>{body}</table>'


def _pretty(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def _notice(kind: str, text: str) -> str:
    return f'<p class="notice {kind}" role="status">{esc(text)}</p>'


def _page(status: int, title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        layout(title, body),
        status_code=status,
        headers={"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"},
    )


async def _form(request: Request) -> dict[str, str] | Response:
    """The edit form's fields, read within `MAX_FORM_BYTES`."""
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        return _page(411, "Refused", _notice("error", "the form needs a Content-Length"))
    if int(length) > MAX_FORM_BYTES:
        return _page(413, "Too large", _notice("error", f"over {MAX_FORM_BYTES} bytes"))
    body = await request.body()
    fields = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


async def _storage_error(request: Request, exc: Exception) -> Response:
    """A store's typed error as a page: a bad key 400, an unreadable format 500, a store
    that does not answer 503."""
    if isinstance(exc, InvalidKeyError):
        return _page(400, "Bad key", _notice("error", str(exc)))
    if isinstance(exc, StorageUnavailableError):
        return _page(503, "Store unavailable", _notice("error", str(exc)))
    if isinstance(exc, FormatError):
        return _page(500, "Unreadable document", _notice("error", str(exc)))
    return _page(500, "Store error", _notice("error", str(exc)))
