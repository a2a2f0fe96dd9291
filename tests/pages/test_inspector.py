"""The state inspector, served by the real `agent-state serve --inspect` over a seeded file
store, in headless Chromium: it lists the store, shows a document, refuses an edit that met
a concurrent change (showing the stored value) and shows hostile keys and values as text."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Dialog, Page, expect

from agent_state import app_key, conversation_key, session_key, user_key, write_group
from agent_state.backends import ANY, FileStorage, StoreItem
from tests.net import free_port, stop
from tests.pages.conftest import run_async, serve, shot

HOSTILE = "<img src=x onerror=alert(1)>"
SEEDED: dict[str, dict[str, Any]] = {
    user_key("web", "ada"): {"name": "Ada", "visits": 3},
    user_key("web", "grace"): {"name": "Grace"},
    user_key("web", HOSTILE): {"name": "<script>alert(2)</script>"},
    conversation_key("web", "c1"): {"topic": "release"},
    session_key("web", "c1", "ada"): {"step": 2},
    session_key("web", "c1", "ada") + "/runs/r1": {"status": "completed"},
    app_key("planner"): {"flag": True},
}


async def _write(folder: Path, documents: dict[str, dict[str, Any]], etag: str | None) -> None:
    async with FileStorage(folder, write_group=write_group) as storage:
        await storage.write({key: StoreItem(value, etag=etag) for key, value in documents.items()})


async def _read(folder: Path, key: str) -> StoreItem:
    async with FileStorage(folder, write_group=write_group) as storage:
        return (await storage.read([key]))[key]


@pytest.fixture(scope="module")
def inspector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`agent-state serve --inspect` on a seeded file store; its URL and the store's folder."""
    folder, port = tmp_path_factory.mktemp("inspector") / "store", free_port()
    run_async(_write(folder, SEEDED, None))
    script = str(Path(sys.executable).parent / "agent-state")
    command = [script, "--store", f"file://{folder}", "serve", "--inspect", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    process = serve(command, url + "/", {})
    yield url, folder
    stop(process)


@pytest.fixture
def no_dialogs(page: Page) -> Iterator[list[str]]:
    """Fails the test if any script on the page opens a dialog (an injected alert)."""
    opened: list[str] = []

    def record(dialog: Dialog) -> None:
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    yield opened
    assert opened == []


def test_the_inspector_lists_the_store_and_shows_a_document(
    page: Page, inspector: tuple[str, Path], tmp_path: Path, no_dialogs: list[str]
) -> None:
    base, folder = inspector
    page.goto(f"{base}/?view=users")
    expect(page.locator("h1")).to_have_text("Users")
    keys = page.locator("#keys td.key a")
    expect(keys).to_have_text(sorted(k for k in SEEDED if k.startswith("web/users/")))
    expect(page.locator("#keys")).to_contain_text(HOSTILE)  # the parsed user id, as text
    assert page.locator("#keys img").count() == 0 and page.locator("main script").count() == 0
    shot(page, tmp_path, "users")
    page.get_by_role("link", name="Sessions").click()
    expect(keys).to_have_text([session_key("web", "c1", "ada")])
    keys.first.click()
    expect(page.locator("h1")).to_have_text("Document")
    stored = run_async(_read(folder, session_key("web", "c1", "ada")))
    expect(page.locator("dl")).to_contain_text(f"version{stored.etag}")
    expect(page.locator("#stored")).to_have_text('{\n  "step": 2\n}')
    expect(page.locator("#keys td.key a")).to_have_text(
        [session_key("web", "c1", "ada") + "/runs/r1"]
    )
    shot(page, tmp_path, "document")


def test_an_edit_that_met_a_concurrent_change_is_refused_and_shown(
    page: Page, inspector: tuple[str, Path], tmp_path: Path, no_dialogs: list[str]
) -> None:
    base, folder = inspector
    key = user_key("web", "ada")
    page.goto(f"{base}/?view=users")
    page.get_by_role("link", name=key, exact=True).click()
    page.fill("textarea", '{"name": "Ada (edited in the page)"}')
    run_async(_write(folder, {key: {"name": "Ada", "visits": 4}}, ANY))  # someone else, meanwhile
    with page.expect_response(lambda response: response.request.method == "POST") as answer:
        page.click("text=Save if unchanged")
    assert answer.value.status == 409
    expect(page.locator(".notice.error")).to_contain_text("someone changed this document")
    expect(page.locator("#stored")).to_contain_text('"visits": 4')
    expect(page.locator("textarea")).to_have_value('{"name": "Ada (edited in the page)"}')
    assert run_async(_read(folder, key)).value == {"name": "Ada", "visits": 4}
    shot(page, tmp_path, "conflict")
    # the refusal page carries the version now stored: saving again is a deliberate overwrite
    page.fill("textarea", '{"name": "Ada", "visits": 4, "plan": "pro"}')
    page.click("text=Save if unchanged")
    expect(page.locator(".notice.ok")).to_have_text("Saved.")
    assert run_async(_read(folder, key)).value == {"name": "Ada", "visits": 4, "plan": "pro"}
