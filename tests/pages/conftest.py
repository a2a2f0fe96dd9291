"""Pages in a real headless Chromium: Debian's `chromium` driven by Playwright for Python
(no browser download), the servers under test in their own processes, a screenshot per test.

The README's test command installs both (tests/services/pages.sh); with
AGENT_STATE_REQUIRE_SERVERS=1 a missing browser fails the tests instead of skipping them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest

from tests.conftest import server_missing
from tests.net import free_port, stop

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("AGENT_STATE_CHROMIUM", "/usr/bin/chromium")
T = TypeVar("T")


def run_async(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to the end on a loop of its own thread (Playwright's sync API holds one in
    the test's thread)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per module (each test gets its own context). Not per session:
    Playwright's sync API keeps an event loop running while it is open, which the async
    tests of the modules after this one could not start their own loop under."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        server_missing("Playwright for Python (the .[pages] extra)")
    if not os.access(CHROMIUM, os.X_OK):
        server_missing(f"Chromium at {CHROMIUM} (Debian's chromium package)")
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)  # how long a check waits for the page: a loaded machine
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, tmp_path: Path) -> Iterator[Page]:
    """A fresh browser context and page; its last view is saved as tmp_path/page.png, and
    a script error on the page fails the test."""
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    opened.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    context.close()
    assert not errors, errors


def shot(page: Page, tmp_path: Path, name: str) -> Path:
    """A screenshot of `page` as it is now, under the test's temporary folder."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


def serve(command: Sequence[str], url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start a server process and wait until `url` answers at all (any status)."""
    process = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            pytest.fail(f"the server exited: {process.communicate()[1]}")
        try:
            httpx.get(url, timeout=1)
            return process
        except httpx.TransportError:
            if time.monotonic() > deadline:
                stop(process)
                pytest.fail(f"{url} did not answer within 30 s")
            time.sleep(0.05)  # polling for the port to open, not synchronizing the test


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """tests/pages/demo_server.py (the example's page and planner, and a gate the test holds)
    on a free port over a FileStorage in a temporary folder; its base URL and folder."""
    folder, port = tmp_path_factory.mktemp("demo"), free_port()
    command = [sys.executable, "-m", "tests.pages.demo_server", "--port", str(port),
               "--dir", str(folder / "state")]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    process = serve(command, url + "/", {"AGENT_STATE_AGUI_DIR": str(folder / "unused")})
    yield url, folder / "state"
    stop(process)
