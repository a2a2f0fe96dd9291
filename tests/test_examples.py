"""The examples, run as the README runs them, in a temp folder, with no optional SDK importable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import BaseEvent, MessagesSnapshotEvent

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Runs a script as __main__ with the optional backend SDKs made unimportable (core install).
CORE_ONLY = """
import runpy, sys
for name in ("redis", "azure", "aiohttp"):
    sys.modules[name] = None
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def run(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "AGENT_STATE_QUICKSTART_DIR"}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", CORE_ONLY, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_remembers_across_runs_in_a_folder_of_the_cwd(tmp_path: Path) -> None:
    first = run("quickstart.py", cwd=tmp_path)
    assert "[team-chat] bot: Nice to meet you, Ada!" in first
    assert "[team-chat] bot: Nice to meet you, Grace!" in first
    assert "[ada-dm] bot: Welcome back, Ada! This is visit 2." in first, "user state crosses chats"
    assert "topic '(none)'" in first, "the 1:1 chat has its own conversation state"
    assert "topic 'release planning'" in first, "group members share conversation state"
    assert "notes ['I own the changelog']" in first, "session state: Grace's notes, not Ada's"
    assert (tmp_path / ".quickstart-state").is_dir()

    second = run("quickstart.py", cwd=tmp_path)
    assert "Nice to meet you" not in second
    assert "[team-chat] bot: Welcome back, Ada! This is visit 3." in second
    assert "[team-chat] bot: Welcome back, Grace! This is visit 2." in second
    assert "I had noted that already" in second
    assert "{'turns': 18}" in second and "{'name': 'Ada', 'visits': 4}" in second


def test_quickstart_folder_from_option_or_environment(tmp_path: Path) -> None:
    run("quickstart.py", "--dir", "by-option", cwd=tmp_path)
    run("quickstart.py", cwd=tmp_path, env={"AGENT_STATE_QUICKSTART_DIR": "by-env"})
    again = run("quickstart.py", cwd=tmp_path, env={"AGENT_STATE_QUICKSTART_DIR": "by-env"})
    assert "This is visit 3." in again
    assert (tmp_path / "by-option").is_dir() and (tmp_path / "by-env").is_dir()
    assert not (tmp_path / ".quickstart-state").exists()


def test_background_job_edits_what_the_quickstart_stored(tmp_path: Path) -> None:
    run("quickstart.py", "--dir", "state", cwd=tmp_path)
    job = run("background_job.py", "--dir", "state", "--min-visits", "2", cwd=tmp_path)
    assert "seeding" not in job
    assert "ada: 2 visits -> granted plan 'pro'" in job
    assert "grace: 1 visits, plan stays 'free'" in job

    chat = run("quickstart.py", "--dir", "state", cwd=tmp_path)
    assert "user: Ada, visits 4, plan 'pro'" in chat, "the bot sees the job's edit"
    assert "user: Grace, visits 2, plan 'free'" in chat
    assert "{'name': 'Ada', 'visits': 4, 'plan': 'pro'}" in chat, "the turns kept the plan"


def test_background_job_seeds_an_empty_folder_then_is_idempotent(tmp_path: Path) -> None:
    first = run("background_job.py", cwd=tmp_path)
    assert "no users on channel 'quickstart' yet" in first and "seeding" in first
    assert "ada: 4 visits -> granted plan 'pro'" in first
    assert "linus: 7 visits -> granted plan 'pro'" in first
    assert "grace: 2 visits, plan stays 'free'" in first

    second = run("background_job.py", cwd=tmp_path)
    assert "seeding" not in second and "granted" not in second
    assert "ada: 4 visits, plan stays 'pro'" in second


async def test_agui_server_app_runs_in_process_and_keeps_client_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runpy

    import httpx
    import pytest

    from agent_state.agui import AGUIClient, RunRefusedError

    monkeypatch.setenv("AGENT_STATE_AGUI_DIR", str(tmp_path / "state"))
    app = runpy.run_path(str(EXAMPLES / "agui_server.py"), run_name="agui_server")["app"]
    transport = httpx.ASGITransport(app)

    def run(number: int, text: str, state: dict[str, Any]) -> dict[str, Any]:
        message = {"id": f"m{number}", "role": "user", "content": text}
        return {"threadId": "t", "runId": f"r{number}", "state": state, "messages": [message],
                "tools": [], "context": [], "forwardedProps": {}}  # fmt: skip

    def said(events: Sequence[BaseEvent]) -> object:
        return [e for e in events if isinstance(e, MessagesSnapshotEvent)][-1].messages[-1].content

    async with AGUIClient("http://test/", headers={"X-User": "ada"}, transport=transport) as ada:
        first = await ada.run(run(1, "draft, review", {}))
        assert said(first) == "0/2 done; now working on 'draft'."
        edited = [{"title": "draft", "status": "doing"}, {"title": "edit", "status": "todo"}]
        second = await ada.run(run(2, "next", {"steps": edited}))
    assert said(second) == "1/2 done; now working on 'edit'.", "the client's rename is kept"
    snapshots = [e.snapshot for e in first + second if e.type == "STATE_SNAPSHOT"]
    assert snapshots and all(set(snapshot) == {"steps"} for snapshot in snapshots)
    assert (tmp_path / "state").is_dir()
    async with AGUIClient("http://test/", transport=transport) as anonymous:
        with pytest.raises(RunRefusedError) as refused:
            await anonymous.run(run(3, "next", {}))
    assert refused.value.status_code == 401


async def test_a_state_mirror_follows_the_agui_server_and_a_refusal_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' StateMirror against the example server: an answer that is no event stream
    (401 without a user) raises `RunRefusedError` instead of leaving the mirror empty."""
    import runpy

    import httpx
    import pytest

    from agent_state.agui import AGUIClient, RunRefusedError, StateMirror

    monkeypatch.setenv("AGENT_STATE_AGUI_DIR", str(tmp_path / "state"))
    app = runpy.run_path(str(EXAMPLES / "agui_server.py"), run_name="agui_server")["app"]
    transport = httpx.ASGITransport(app)
    ask = {"id": "m1", "role": "user", "content": "notes, tag"}
    mirror = StateMirror(thread_id="release", messages=[ask])
    async with AGUIClient("http://test/", transport=transport) as anonymous:
        with pytest.raises(RunRefusedError) as refused:
            await mirror.arun(anonymous)
    assert refused.value.status_code == 401 and mirror.state is None
    async with AGUIClient("http://test/", headers={"X-User": "ada"}, transport=transport) as ada:
        await mirror.arun(ada)
    assert mirror.state is not None
    assert [step["title"] for step in mirror.state["steps"]] == ["notes", "tag"]
    assert mirror.messages[-1]["content"] == "0/2 done; now working on 'notes'."


def run_with_sdks(script: str, *args: str, cwd: Path) -> str:
    """Run a bridge example as its docs do: with its framework's SDK (an extra) installed."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_m365_bot_keeps_both_concurrent_turns_on_our_file_store(tmp_path: Path) -> None:
    first = run_with_sdks("m365_bot.py", cwd=tmp_path)
    assert "stored conversation state: {'messages': 2}" in first
    numbers = [line.rsplit(" ", 1)[1] for line in first.splitlines() if line.startswith("bot: ")]
    assert sorted(numbers) == ["1", "2"], "each turn saw the other's increment or none"
    second = run_with_sdks("m365_bot.py", cwd=tmp_path)
    assert "stored conversation state: {'messages': 4}" in second, "kept across runs"


def test_adk_agent_shares_user_state_with_an_agent_state_bot(tmp_path: Path) -> None:
    out = run_with_sdks("adk_agent.py", "--dir", "store", cwd=tmp_path)
    assert out.splitlines() == [
        "agent: visit 1",
        "agent: visit 2",
        "bot: visit 3",
        "user state: {'visits': 3}; the agent's session holds 4 events",
    ]
    assert (tmp_path / "store").is_dir()
