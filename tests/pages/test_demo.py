"""The demo page (examples/pages, served by the example server's page routes) in headless
Chromium, on the real @ag-ui/client: a run streams into the page, a reload restores the
thread, a reload mid-run resumes it from the last event id, a second tab sees the thread,
and another user's thread is refused."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from agent_state import SessionState, TurnIds, read_state, write_group
from agent_state.backends import FileStorage
from tests.pages.conftest import run_async, shot

ASK = "write the notes, tag the release, announce it"
IDLE = "Idle: the plan is saved on the server."


def open_thread(page: Page, base: str, user: str, thread: str) -> None:
    page.goto(f"{base}/demo/?user={user}&thread={thread}")
    expect(page.locator("#status")).to_contain_text("Idle")


def steps_shown(page: Page) -> list[dict[str, str]]:
    titles: list[str] = page.locator("#steps .title").evaluate_all("els => els.map(e => e.value)")
    states: list[str] = page.locator("#steps .status").evaluate_all("els => els.map(e => e.value)")
    return [
        {"title": title, "status": status} for title, status in zip(titles, states, strict=True)
    ]


def expect_waiting(page: Page) -> None:
    """Wait until the page shows the held run's one streamed step."""
    expect(page.locator("#steps .title")).to_have_count(1)
    expect(page.locator("#steps .title")).to_have_value("waiting for the test")


def messages_shown(page: Page) -> list[str]:
    texts: list[str] = page.locator("#messages li").all_inner_texts()
    return texts


def stored(folder: Path, user: str, thread: str) -> dict[str, Any]:
    """The thread's session bucket as the server stored it, read through the library."""

    async def read() -> dict[str, Any]:
        storage = FileStorage(folder, write_group=write_group)
        try:
            return dict(
                (await read_state(storage, SessionState, TurnIds("agui", user, thread))).data
            )
        finally:
            await storage.close()

    return run_async(read())


def send(page: Page, text: str) -> None:
    page.fill("#ask input", text)
    page.click("#ask button")


def test_a_run_streams_into_the_page_and_edits_are_kept(
    page: Page, demo: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = demo
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    thread = f"t-{uuid.uuid4().hex[:8]}"
    open_thread(page, base, "ada", thread)
    shot(page, tmp_path, "empty")
    httpx.post(f"{base}/test/hold/{thread}").raise_for_status()
    send(page, ASK)
    # the run is under way (held by the test): the page shows the state streamed so far
    expect_waiting(page)
    expect(page.locator("#status")).to_contain_text("Streaming run")
    shot(page, tmp_path, "streaming")
    httpx.post(f"{base}/test/release/{thread}").raise_for_status()
    expect(page.locator("#status")).to_have_text(IDLE)
    state = stored(folder, "ada", thread)
    assert (
        steps_shown(page)
        == state["steps"]
        == [
            {"title": "write the notes", "status": "doing"},
            {"title": "tag the release", "status": "todo"},
            {"title": "announce it", "status": "todo"},
        ]
    )
    assert state["runs"] == 1  # server-only: stored, never on the page
    assert messages_shown(page)[-1].endswith("0/3 done; now working on 'write the notes'.")
    # the user's edit goes with the next run as client state, and the server keeps it
    page.locator("#steps .title").nth(2).fill("announce it on the blog")
    page.locator("#steps .title").nth(2).press("Enter")
    page.fill("#add-step input", "celebrate")
    page.click("#add-step button")
    send(page, "next")
    expect(page.locator("#status")).to_have_text(IDLE)
    expect(page.locator("#messages li")).to_have_count(4)
    state = stored(folder, "ada", thread)
    assert (
        steps_shown(page)
        == state["steps"]
        == [
            {"title": "write the notes", "status": "done"},
            {"title": "tag the release", "status": "doing"},
            {"title": "announce it on the blog", "status": "todo"},
            {"title": "celebrate", "status": "todo"},
        ]
    )
    expect(page.locator("#threads li.current a")).to_have_text(ASK)
    expect(page.locator("#title")).to_have_text(ASK)  # the thread service's title
    shot(page, tmp_path, "after-two-runs")
    assert f"{base}/demo/ag-ui-client.js" in requested  # the bundle, from our server
    assert all(url.startswith(base + "/") for url in requested), requested  # no CDN


def test_a_reload_restores_the_thread_from_the_thread_service(
    page: Page, demo: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = demo
    thread = f"t-{uuid.uuid4().hex[:8]}"
    open_thread(page, base, "ada", thread)
    send(page, "draft, review")
    expect(page.locator("#status")).to_have_text(IDLE)
    before_steps, before_messages = steps_shown(page), messages_shown(page)
    page.reload()
    expect(page.locator("#status")).to_have_text("Idle.")
    assert steps_shown(page) == before_steps == stored(folder, "ada", thread)["steps"]
    assert messages_shown(page) == before_messages and len(before_messages) == 2
    expect(page.locator("#title")).to_have_text("draft, review")
    shot(page, tmp_path, "reloaded")


def test_a_reload_mid_run_resumes_it_from_the_last_event_seen(
    page: Page, demo: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = demo
    thread = f"t-{uuid.uuid4().hex[:8]}"
    open_thread(page, base, "ada", thread)
    httpx.post(f"{base}/test/hold/{thread}").raise_for_status()
    send(page, "plan, build, ship")
    expect_waiting(page)
    key = f"agui-demo-run:ada:{thread}"
    page.wait_for_function(
        f"(JSON.parse(sessionStorage.getItem({key!r})) || {{}}).lastEventId >= 2"
    )
    seen = page.evaluate(f"JSON.parse(sessionStorage.getItem({key!r})).lastEventId")
    page.reload()
    # the page resumed the run (the events after the last id it applied) while it is held
    expect(page.locator("#status")).to_contain_text("Resumed run")
    expect_waiting(page)
    shot(page, tmp_path, "resumed-mid-run")
    httpx.post(f"{base}/test/release/{thread}").raise_for_status()
    expect(page.locator("#status")).to_have_text(IDLE)
    assert (
        steps_shown(page)
        == stored(folder, "ada", thread)["steps"]
        == [
            {"title": "plan", "status": "doing"},
            {"title": "build", "status": "todo"},
            {"title": "ship", "status": "todo"},
        ]
    )
    replies = [text for text in messages_shown(page) if text.startswith("agent")]
    assert len(replies) == 1 and replies[0].endswith("now working on 'plan'.")
    assert page.evaluate(f"sessionStorage.getItem({key!r})") is None  # the run is over
    assert seen >= 2


def test_a_second_tab_of_the_user_sees_the_same_thread(
    page: Page, demo: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = demo
    thread = f"t-{uuid.uuid4().hex[:8]}"
    open_thread(page, base, "ada", thread)
    send(page, "one, two")
    expect(page.locator("#status")).to_have_text(IDLE)
    second = page.context.new_page()
    open_thread(second, base, "ada", thread)
    assert steps_shown(second) == steps_shown(page)
    expect(second.locator("#threads li.current a")).to_have_text("one, two")
    send(second, "next")
    expect(second.locator("#status")).to_have_text(IDLE)
    page.reload()
    expect(page.locator("#status")).to_have_text("Idle.")
    assert steps_shown(page) == steps_shown(second) == stored(folder, "ada", thread)["steps"]
    assert steps_shown(page)[0] == {"title": "one", "status": "done"}
    shot(second, tmp_path, "second-tab")


def test_another_users_thread_is_refused(
    page: Page, demo: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = demo
    thread = f"t-{uuid.uuid4().hex[:8]}"
    open_thread(page, base, "ada", thread)
    send(page, "secret, plans")
    expect(page.locator("#status")).to_have_text(IDLE)
    page.goto(f"{base}/demo/?user=mallory&thread={thread}")
    expect(page.locator("#error")).to_contain_text("Cannot open this thread (403)")
    expect(page.locator("#steps li")).to_have_count(0)
    expect(page.locator("#ask button")).to_be_disabled()
    expect(page.locator("#threads li")).to_have_count(0)
    shot(page, tmp_path, "refused")
    assert [step["title"] for step in stored(folder, "ada", thread)["steps"]] == ["secret", "plans"]


def test_without_a_user_the_page_asks_for_one(page: Page, demo: tuple[str, Path]) -> None:
    base, _ = demo
    page.goto(f"{base}/demo/")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#app")).to_be_hidden()
    page.fill("#login input", "grace")
    page.click("#login button")
    expect(page.locator("#who")).to_have_text("signed in as grace")
    expect(page.locator("#status")).to_have_text("Idle.")
    assert "thread=" in page.url
