"""The inspector app over HTTP (in process) on memory and file stores: listings, a document,
conditional edits, escaping of untrusted keys and values, and the loopback guard."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_state import app_key, conversation_key, session_key, user_key
from agent_state.backends import ANY, FileStorage, MemoryStorage, Storage, StoreItem
from agent_state.inspect import InspectorConfigError, check_bind_host, inspector_app

HOSTILE = "<script>alert(1)</script>"
RAW_KEY = 'x/<img src=x onerror="alert(2)">'
SEEDED: dict[str, dict[str, Any]] = {
    user_key("web", "ada"): {"name": "Ada", "visits": 3},
    user_key("web", "bob"): {"name": "Bob"},
    user_key("web", HOSTILE): {"name": HOSTILE, "bio": "</pre></textarea><b>x</b>"},
    conversation_key("web", "c1"): {"topic": "release"},
    session_key("web", "c1", "ada"): {"step": 2},
    app_key("planner"): {"flag": True},
    RAW_KEY: {"note": HOSTILE},
}


@pytest.fixture(params=["memory", "file"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store: Storage = MemoryStorage() if request.param == "memory" else FileStorage(tmp_path)
    async with store:
        await store.write({key: StoreItem(value, etag=None) for key, value in SEEDED.items()})
        yield store


def client(app: Any, address: str = "127.0.0.1", host: str = "127.0.0.1:8300") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url=f"http://{host}")


def keys_listed(page: str) -> list[str]:
    """The keys a listing links to, unescaped as a browser reads them."""
    import html

    return [html.unescape(key) for key in re.findall(r'<td class="key"><a [^>]*>([^<]*)</a>', page)]


def form_of(page: str) -> dict[str, str]:
    """The hidden fields of a document page's edit form."""
    import html

    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page)
    return {name: html.unescape(value) for name, value in fields}


async def test_each_view_lists_its_scope(storage: Storage) -> None:
    async with client(inspector_app(storage)) as http:
        users = keys_listed((await http.get("/", params={"view": "users"})).text)
        sessions = keys_listed((await http.get("/", params={"view": "sessions"})).text)
        conversations = keys_listed((await http.get("/", params={"view": "conversations"})).text)
        apps = keys_listed((await http.get("/", params={"view": "app"})).text)
        everything = keys_listed((await http.get("/")).text)
    assert users == sorted(
        [user_key("web", "ada"), user_key("web", "bob"), user_key("web", HOSTILE)]
    )
    assert sessions == [session_key("web", "c1", "ada")]
    assert conversations == [conversation_key("web", "c1")]
    assert apps == [app_key("planner")]
    assert everything == sorted(SEEDED)


async def test_listing_is_paged_in_key_order(storage: Storage) -> None:
    async with client(inspector_app(storage, page_size=3)) as http:
        seen: list[str] = []
        url: str | None = "/?view=all"
        pages = 0
        while url is not None:
            page = (await http.get(url)).text
            listed = keys_listed(page)
            assert len(listed) <= 3
            seen += listed
            pages += 1
            following = re.search(r'<a id="next" href="([^"]*)"', page)
            url = following.group(1).replace("&amp;", "&") if following else None
    assert seen == sorted(SEEDED) and pages == 3


async def test_document_shows_json_version_ttl_size_and_what_is_under_it(storage: Storage) -> None:
    key = session_key("web", "c1", "ada")
    await storage.write({key + "/runs/r1": StoreItem({"status": "completed"}, etag=None)})
    await storage.write({user_key("web", "ada"): StoreItem({"name": "Ada"}, etag=ANY, ttl=600)})
    stored = await storage.read([user_key("web", "ada"), key])
    async with client(inspector_app(storage)) as http:
        user_page = await http.get("/doc", params={"key": user_key("web", "ada")})
        session_page = await http.get("/doc", params={"key": key})
        missing = await http.get("/doc", params={"key": user_key("web", "nobody")})
    assert user_page.status_code == 200
    assert f"<dd>{stored[user_key('web', 'ada')].etag}</dd>" in user_page.text
    assert "<dd>14 bytes</dd>" in user_page.text  # {"name":"Ada"}
    assert re.search(r"<dd>(59\d|600) s left</dd>", user_page.text)
    assert "&quot;name&quot;: &quot;Ada&quot;" in user_page.text
    assert "none (lives for good)" in session_page.text
    assert keys_listed(session_page.text) == [key + "/runs/r1"]
    assert "<dd>run</dd>" not in session_page.text and ">run</td>" in session_page.text
    assert missing.status_code == 404


async def test_untrusted_keys_and_values_are_escaped(storage: Storage) -> None:
    hostile_user = user_key("web", HOSTILE)
    async with client(inspector_app(storage)) as http:
        pages = [
            (await http.get("/", params={"view": "users"})).text,
            (await http.get("/")).text,
            (await http.get("/doc", params={"key": hostile_user})).text,
            (await http.get("/doc", params={"key": RAW_KEY})).text,
            (await http.get("/", params={"prefix": HOSTILE})).text,
            (await http.get("/", params={"view": HOSTILE})).text,
        ]
    for page in pages:
        assert "<script" not in page and "<img" not in page and "<b>x</b>" not in page
        assert "</textarea><" not in page.split("<textarea", 1)[-1].split("</textarea>", 1)[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[0]  # the user id, parsed
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in pages[1]
    assert keys_listed(pages[1]).count(RAW_KEY) == 1


async def test_an_edit_is_written_on_the_version_shown(storage: Storage) -> None:
    key = user_key("web", "ada")
    async with client(inspector_app(storage)) as http:
        form = form_of((await http.get("/doc", params={"key": key})).text)
        saved = await http.post("/doc", data={**form, "document": '{"name": "Ada L."}'})
        after = await http.get(saved.headers["location"])
    assert saved.status_code == 303
    assert (await storage.read([key]))[key].value == {"name": "Ada L."}
    assert "Saved." in after.text


async def test_a_concurrent_change_is_shown_never_overwritten(storage: Storage) -> None:
    key = user_key("web", "ada")
    async with client(inspector_app(storage)) as http:
        form = form_of((await http.get("/doc", params={"key": key})).text)
        await storage.write({key: StoreItem({"name": "Ada", "visits": 4}, etag=form["version"])})
        refused = await http.post("/doc", data={**form, "document": '{"name": "mine"}'})
    current = (await storage.read([key]))[key]
    assert refused.status_code == 409
    assert current.value == {"name": "Ada", "visits": 4}
    assert "someone changed this document" in refused.text
    assert "&quot;visits&quot;: 4" in refused.text  # the stored value, shown
    assert "{&quot;name&quot;: &quot;mine&quot;}" in refused.text  # the user's edit, kept
    assert form_of(refused.text)["version"] == current.etag  # a retry builds on the new one


async def test_refused_edits_write_nothing(storage: Storage) -> None:
    key = user_key("web", "bob")
    before = (await storage.read([key]))[key]
    async with client(inspector_app(storage)) as http:
        form = form_of((await http.get("/doc", params={"key": key})).text)
        not_json = await http.post("/doc", data={**form, "document": "{nope"})
        not_object = await http.post("/doc", data={**form, "document": "[1]"})
        nan = await http.post("/doc", data={**form, "document": '{"x": NaN}'})
        foreign = await http.post("/doc", data={**form, "token": "guess", "document": "{}"})
        no_token = await http.post(
            "/doc", data={"key": key, "version": form["version"], "document": "{}"}
        )
    assert [r.status_code for r in (not_json, not_object, nan, foreign, no_token)] == [
        422, 422, 422, 403, 403
    ]  # fmt: skip
    assert (await storage.read([key]))[key] == before


async def test_a_bad_key_is_a_typed_400(storage: Storage) -> None:
    async with client(inspector_app(storage)) as http:
        response = await http.get("/doc", params={"key": "a//b"})
    assert response.status_code == 400 and "Bad key" in response.text


async def test_other_machines_and_host_names_are_refused(storage: Storage) -> None:
    key = user_key("web", "ada")
    async with client(inspector_app(storage), address="203.0.113.5") as http:
        remote = await http.get("/")
        remote_edit = await http.post("/doc", data={"key": key, "document": "{}"})
    async with client(inspector_app(storage), host="attacker.example:8300") as http:
        rebound = await http.get("/")
    async with client(inspector_app(storage), address="::1", host="[::1]:8300") as http:
        local_v6 = await http.get("/")
    async with client(inspector_app(storage, allow_remote=True), address="203.0.113.5") as http:
        allowed = await http.get("/")
    assert [remote.status_code, remote_edit.status_code, rebound.status_code] == [403, 403, 403]
    assert "loopback" in remote.text
    assert local_v6.status_code == 200 and allowed.status_code == 200
    assert (await storage.read([key]))[key].value == SEEDED[key]


def test_binding_beyond_loopback_needs_the_explicit_flag() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        check_bind_host(host)
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        with pytest.raises(InspectorConfigError, match="--allow-remote"):
            check_bind_host(host)
        check_bind_host(host, allow_remote=True)
