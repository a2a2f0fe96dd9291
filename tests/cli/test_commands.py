"""The command line as a user runs it: every command on a file store (and the ones that only
read on Redis and Azurite too), `--help` everywhere, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_state import conversation_key, session_key, user_key
from agent_state.cli._main import cli as group
from tests.stores import STORES

from .support import ROOT, cli, one_line_error, seed, stored

EDITOR = f"{sys.executable} {ROOT / 'tests' / 'cli' / 'concurrent_editor.py'}"
ADA = user_key("msteams", "29:ada")


@pytest.fixture
def store(tmp_path: Path) -> str:
    return STORES["file"](str(tmp_path))


def test_every_command_has_help() -> None:
    names = sorted(group.commands)
    assert {"inspect", "ls", "edit", "set", "delete", "migrate", "doctor"} <= set(names)
    top = cli("--help")
    assert top.returncode == 0 and all(name in top.stdout for name in names)
    for name in names:
        result = cli(name, "--help")
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Usage: agent-state {name} ")


def test_python_dash_m_runs_the_same_command_line() -> None:
    result = subprocess.run([sys.executable, "-m", "agent_state", "--help"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0 and "migrate" in result.stdout


def test_without_the_cli_extra_it_names_the_extra() -> None:
    code = "import sys; sys.modules['click'] = None; from agent_state.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code, "--help"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "agent-state: the command line needs the 'cli' extra (click is missing): "
        "pip install -e '.[cli]' in the agent-state clone\n"
    )


@pytest.mark.parametrize(
    ("args", "store", "says"),
    [
        (("ls",), None, "no store given: pass --store URL or set AGENT_STATE_URL"),
        (("ls",), "nowhere", "fix --store or $AGENT_STATE_URL"),
        (("ls",), "gopher://x", "unknown storage scheme 'gopher'"),
        (("ls",), "redis://127.0.0.1:1/0", "the store failed"),
        (("lsx",), "memory://", "No such command 'lsx'"),
        (("ls", "--limit", "0"), "memory://", "--limit: must be at least 1"),
        (("inspect",), "memory://", "give a KEY, or --channel with --user"),
        (("inspect", "a/b"), "memory://", "nothing is stored at 'a/b'"),
        (("set", "a/b", "[1]"), "memory://", "DOCUMENT must be a JSON object"),
        (("set", "a/b", "{"), "memory://", "DOCUMENT is not JSON"),
        (("set", "a//b", "{}"), "memory://", "a//b"),
        (("delete", "a", "b", "--if-version", "1"), "memory://", "--if-version takes exactly"),
    ],
)
def test_errors_are_one_line_and_fail(args: tuple[str, ...], store: str | None, says: str) -> None:
    assert says in one_line_error(cli(*args, store=store))


async def test_ls_pages_in_key_order(store: str) -> None:
    keys = [user_key("msteams", f"u{n}") for n in range(7)]
    await seed(store, {key: {"n": 1} for key in reversed(keys)})
    await seed(store, {conversation_key("msteams", "c"): {}, user_key("slack", "u"): {}})
    pages, after = [], None
    while True:
        args = ["ls", "msteams/users/", "--limit", "3", "--json"]
        result = cli(*args, *(["--after", after] if after else []), store=store)
        page = json.loads(result.stdout)
        pages.append(page["keys"])
        after = page["next_after"]
        if after is None:
            break
    assert pages == [keys[0:3], keys[3:6], keys[6:]]
    plain = cli("ls", "msteams/users/", "--limit", "5", store=store)
    assert plain.stdout.splitlines() == keys[:5]
    assert plain.stderr == f"more: agent-state ls 'msteams/users/' --after {keys[4]!r}\n"


async def test_inspect_a_user_a_conversation_and_a_session(store: str) -> None:
    conversation = conversation_key("msteams", "19:c")
    session = session_key("msteams", "19:c", "29:ada")
    await seed(store, {ADA: {"_schema": 2, "name": "Ada"}, conversation: {"topic": "t"},
                       session: {"step": 1}})  # fmt: skip

    def inspect(*args: str) -> dict[str, Any]:
        result = cli("inspect", *args, "--json", store=store)
        assert result.returncode == 0, result.stderr
        found: dict[str, Any] = json.loads(result.stdout)
        return found

    user = inspect("--channel", "msteams", "--user", "29:ada")
    (document,) = user["documents"]
    assert document["key"] == ADA and document["document"] == {"_schema": 2, "name": "Ada"}
    assert document["schema_version"] == 2 and document["bytes"] == len(
        '{"_schema":2,"name":"Ada"}'
    )
    version = (await stored_versions(store, [ADA]))[ADA]
    assert document["version"] == version
    whole = inspect("--channel", "msteams", "--conversation", "19:c")
    assert [d["key"] for d in whole["documents"]] == [conversation, session]
    alone = inspect("--channel", "msteams", "--conversation", "19:c", "--user", "29:ada")
    assert [d["document"] for d in alone["documents"]] == [{"step": 1}]
    assert inspect(session) == alone
    pretty = cli("inspect", session, store=store)
    assert json.loads(pretty.stdout) == alone and pretty.stdout.count("\n") > 3


async def stored_versions(url: str, keys: list[str]) -> dict[str, str | None]:
    from agent_state import open_storage

    async with open_storage(url) as storage:
        return {key: item.etag for key, item in (await storage.read(keys)).items()}


async def test_set_and_delete_are_conditional(store: str) -> None:
    created = cli("set", ADA, '{"name": "Ada"}', "--if-absent", store=store)
    assert created.returncode == 0, created.stderr
    version = (await stored_versions(store, [ADA]))[ADA]
    assert created.stdout == f"{ADA}: saved as version {version}\n"
    assert "changed since it was read" in one_line_error(
        cli("set", ADA, "{}", "--if-absent", store=store)
    )
    assert "nothing was written" in one_line_error(
        cli("set", ADA, "{}", "--if-version", "stale", store=store)
    )
    from_stdin = cli("set", ADA, "--if-version", str(version), stdin='{"name": "Ada L."}',
                     store=store)  # fmt: skip
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert await stored(store, [ADA]) == {ADA: {"name": "Ada L."}}
    assert "nothing was deleted" in one_line_error(
        cli("delete", ADA, "--if-version", str(version), store=store)
    )
    newest = (await stored_versions(store, [ADA]))[ADA]
    assert newest is not None
    assert cli("delete", ADA, "--if-version", newest, store=store).returncode == 0
    assert await stored(store, [ADA]) == {}


async def test_edit_writes_what_the_editor_saved(store: str) -> None:
    await seed(store, {ADA: {"name": "Ada"}})
    result = cli("edit", ADA, store=store, env={"EDITOR": EDITOR})
    assert result.returncode == 0, result.stderr
    assert await stored(store, [ADA]) == {ADA: {"name": "Ada", "edited": True}}


async def test_edit_refuses_when_the_document_changed_meanwhile(store: str) -> None:
    await seed(store, {ADA: {"name": "Ada"}})
    result = cli("edit", ADA, store=store, env={"EDITOR": EDITOR, "CHANGE_MEANWHILE": ADA})
    error = one_line_error(result)
    assert error == (
        f"agent-state: error: {ADA!r} changed since it was read (or its version is not the "
        "one given); nothing was written: read it again and retry"
    )
    assert await stored(store, [ADA]) == {ADA: {"changed": "meanwhile"}}


async def test_edit_of_a_new_key_creates_it_only_if_still_absent(store: str) -> None:
    result = cli("edit", ADA, store=store, env={"EDITOR": EDITOR, "CHANGE_MEANWHILE": ADA})
    assert "nothing was written" in one_line_error(result)
    assert await stored(store, [ADA]) == {ADA: {"changed": "meanwhile"}}
    bob = user_key("msteams", "29:bob")
    assert cli("edit", bob, store=store, env={"EDITOR": EDITOR}).returncode == 0
    assert await stored(store, [bob]) == {bob: {"edited": True}}


@pytest.mark.parametrize("backend", ["file", "redis", "blob"])
async def test_doctor_passes_on_a_healthy_store(backend: str, tmp_path: Path) -> None:
    url = STORES[backend](str(tmp_path))
    await seed(url, {ADA: {"name": "Ada"}})
    result = cli("doctor", "--write-probe", "--json", store=url)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = json.loads(result.stdout)["checks"]
    assert [check["check"] for check in checks] == [
        "configuration", "connectivity", f"format of {ADA}", "write access"
    ]  # fmt: skip
    assert all(check["ok"] for check in checks)
    assert await stored(url, [ADA]) == {ADA: {"name": "Ada"}}  # the probe is gone
    assert "AccountKey" not in result.stdout and "connection_string" not in result.stdout


async def test_doctor_names_an_unreadable_document(store: str, tmp_path: Path) -> None:
    await seed(store, {ADA: {"name": "Ada"}, user_key("msteams", "29:bob"): {}})
    (path,) = [p for p in (tmp_path / "store").rglob("*") if p.is_file() and "ada" in p.name]
    path.write_text(path.read_text().replace('"v":1', '"v":99'))
    result = cli("doctor", store=store)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"store: {store}", "ok   configuration: FileStorage configured",
                         "ok   connectivity: reached, credentials and container/database "
                         "accepted; 2 key(s) listed"]  # fmt: skip
    (failed,) = [line for line in lines if line.startswith("FAIL")]
    assert failed.startswith(f"FAIL format of {ADA}: ") and "99" in failed


def test_doctor_fails_on_an_unreachable_store() -> None:
    result = cli("doctor", store="redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stdout.splitlines()[2].startswith("FAIL connectivity: ")
