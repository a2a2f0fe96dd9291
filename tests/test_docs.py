"""Docs that run: every ```python block of README.md and docs/*.md is executed as written.

Conventions for the blocks (the rules a doc author follows):

- Each document runs in a fresh subprocess (this file run as a script), in an empty
  temporary working directory, so the state folders its blocks create go away. Its blocks
  run in document order.
- A block runs in a fresh namespace, so it carries its own imports and setup, unless its
  first line is `# continues the block above`: it then runs in the namespace the previous
  block of the same document left (the first block of a document cannot continue).
- A block may use top-level `await`, `async with` and `async for`, as `python -m asyncio`
  accepts them; such a block runs on the document's one event loop. A block without them
  runs as a script does (it may call `asyncio.run`).
- A block whose first line is `# needs <what>` (e.g. `# needs a Redis server`) is only
  compiled, not run; the marker names why. Such blocks are meant to be rare.
- Blocks that configure a service read its settings from the environment, and this test
  sets local substitutes there (`SUBSTITUTES`; clients are built but nothing is sent). The
  AG-UI block posts to `$AGUI_AGENT_URL`, served here by a small local SSE agent.
- Signatures and other text that is not runnable Python use a fence without `python`.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent_state import TurnIds, read_state, user_key
from agent_state.backends import MemoryStorage, StoreItem

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONTINUES = "# continues the block above"
NEEDS = re.compile(r"# needs (?P<what>\w.*)")
_FENCE = re.compile(r"^```python[ \t]*\n(?P<source>.*?)^```[ \t]*$", re.M | re.S)

SUBSTITUTES = {
    # Azurite's published development account: a well-formed string pointing at loopback.
    "AZURE_STORAGE_CONNECTION_STRING": (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
        "KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
    ),
    "AZURE_COSMOS_ENDPOINT": "http://127.0.0.1:1/",
    # The Cosmos DB emulator's published key.
    "AZURE_COSMOS_KEY": (
        "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
    ),
}


@dataclass(frozen=True)
class Block:
    """One ```python block: where it starts (the line of its first code line) and its code."""

    document: Path
    line: int
    source: str

    @property
    def continues(self) -> bool:
        return self.source.startswith(CONTINUES + "\n")

    @property
    def needs(self) -> str | None:
        first = self.source.split("\n", 1)[0]
        match = NEEDS.fullmatch(first)
        return match["what"] if match else None

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks_of(document: Path) -> list[Block]:
    """The document's ```python blocks, in order."""
    text = document.read_text(encoding="utf-8")
    return [
        Block(document, text.count("\n", 0, match.start("source")) + 1, match["source"])
        for match in _FENCE.finditer(text)
    ]


def run_blocks(blocks: list[Block]) -> dict[str, Any]:
    """Run the blocks by the conventions above; return the namespace the last one left.

    Each block is compiled under its document's name with its own line numbers, so a
    traceback points at the document line that failed.
    """
    loop = asyncio.new_event_loop()
    namespace: dict[str, Any] = {}
    try:
        for block in blocks:
            code = compile(
                "\n" * (block.line - 1) + block.source,
                str(block.document.relative_to(ROOT)),
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                dont_inherit=True,  # not this file's `from __future__ import annotations`
            )
            if block.needs is not None:
                continue
            if not block.continues:
                namespace = {"__name__": "__main__"}
            if code.co_flags & inspect.CO_COROUTINE:
                loop.run_until_complete(eval(code, namespace))
            else:
                exec(code, namespace)
    finally:
        loop.close()
    return namespace


@dataclass
class _Agent:
    """A local AG-UI agent: answers every POST with one run's events over SSE."""

    url: str
    runs: list[dict[str, Any]]


@pytest.fixture
def agent() -> Iterator[_Agent]:
    """The local agent the AG-UI block posts to (`$AGUI_AGENT_URL`): like the example
    server, it answers 401 to a request without an `X-User` header."""
    runs: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            run_input = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self.headers.get("X-User"):  # as examples/agui_server.py authenticates
                self._answer(401, "application/json", b'{"detail": "who are you?"}')
                return
            runs.append(run_input)
            ids = {"threadId": run_input["threadId"], "runId": run_input["runId"]}
            events = [
                {"type": "RUN_STARTED", **ids},
                {"type": "STATE_SNAPSHOT", "snapshot": {"step": 1, "todo": []}},
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/todo/-", "value": "x"}]},
                {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Done."},
                {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
                {"type": "RUN_FINISHED", **ids},
            ]
            body = "".join(f"data: {json.dumps(event)}\n\n" for event in events).encode()
            self._answer(200, "text/event-stream", body)

        def _answer(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reports what matters."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Agent(f"http://127.0.0.1:{server.server_address[1]}/agent", runs)
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def run_document(document: Path, cwd: Path, agent_url: str) -> subprocess.CompletedProcess[str]:
    """Run one document's blocks in a fresh interpreter (`-I`: the repository is not on
    `sys.path`, so blocks see only the installed package, as a user's script does)."""
    env = {**os.environ, **SUBSTITUTES, "AGUI_AGENT_URL": agent_url}
    return subprocess.run(
        [sys.executable, "-I", __file__, str(document)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_python_block_runs(document: Path, tmp_path: Path, agent: _Agent) -> None:
    result = run_document(document, tmp_path, agent.url)
    assert result.returncode == 0, result.stderr


def test_the_markers_are_well_formed() -> None:
    """A first block continues nothing, and a `# needs` marker names what is needed."""
    blocks = [block for document in DOCUMENTS for block in blocks_of(document)]
    assert len(blocks) > 10  # the extraction found the docs' blocks
    for document in DOCUMENTS:
        firsts = blocks_of(document)[:1]
        assert not any(block.continues for block in firsts), f"{document.name}: continues nothing"
    for block in blocks:
        first_line = block.source.split("\n", 1)[0]
        assert not first_line.startswith("# needs") or block.needs, f"{block.where}: needs what?"


def test_the_agui_block_talks_to_the_agent(tmp_path: Path, agent: _Agent) -> None:
    result = run_document(ROOT / "docs" / "agui.md", tmp_path, agent.url)
    assert result.returncode == 0, result.stderr
    assert len(agent.runs) == 1
    assert "{'step': 1, 'todo': ['x']}" in result.stdout
    assert "Done." in result.stdout


def _section_block(document: Path, heading: str) -> Block:
    """The first ```python block after `heading` in `document`."""
    text = document.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    line = text.count("\n", 0, start) + 2
    return next(block for block in blocks_of(document) if block.line > line)


def test_the_ten_line_bot_prints_what_it_did(tmp_path: Path) -> None:
    block = _section_block(ROOT / "README.md", "## A bot in ten lines")
    script = tmp_path / "bot.py"
    script.write_text(block.source, encoding="utf-8")
    for visit in (1, 2):  # its file store keeps the count between runs
        result = subprocess.run(
            [sys.executable, "-I", str(script)], cwd=tmp_path, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"Hello! Visit number {visit}.\n"


@pytest.mark.parametrize("document", ["README.md", "docs/guide.md"])
def test_the_typed_state_migration_keeps_the_name(
    document: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = blocks_of(ROOT / document)
    migration = next(i for i, block in enumerate(blocks) if ".migration(" in block.source)
    start = max(i for i in range(migration + 1) if not blocks[i].continues)
    profile_state = run_blocks(blocks[start : migration + 1])["ProfileState"]

    async def name_after_migration(stored: dict[str, Any]) -> str:
        storage = MemoryStorage()
        ids = TurnIds(channel_id="msteams", user_id="29:ada")
        await storage.write({user_key("msteams", "29:ada"): StoreItem(stored, None)})
        name: str = (await read_state(storage, profile_state, ids)).data.name
        return name

    assert asyncio.run(name_after_migration({"full_name": "Ada Lovelace"})) == "Ada Lovelace"
    assert asyncio.run(name_after_migration({"name": "Ada", "visits": 2})) == "Ada"
    assert asyncio.run(name_after_migration({"visits": 2})) == ""


def _public_errors() -> dict[str, tuple[str, type[BaseException]]]:
    """Every public exception class: name -> (the public module exporting it, the class).

    The public modules are the ones `tests/test_packaging.py` pins; their names come from
    each module's `__all__` (or, without one, what the module itself defines)."""
    # Imported here: a document's subprocess runs this file without the repository on sys.path.
    from tests.test_packaging import PUBLIC_MODULES

    found: dict[str, tuple[str, type[BaseException]]] = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            exported = [n for n, v in vars(module).items() if getattr(v, "__module__", "") == name]
        for attr in exported:
            value = getattr(module, attr)
            if isinstance(value, type) and issubclass(value, BaseException):
                found[attr] = (name, value)
    return found


def _error_table() -> list[tuple[str, str, list[str]]]:
    """The README's error table: (error, module, subclass of) per row, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Errors\n") :].split("\n## ", 2)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            error, module, bases = [cell.strip() for cell in line.strip("|").split("|")][:3]
            rows.append((error.strip("`"), module.strip("`"), re.findall(r"`(\w+)`", bases)))
    return rows


def test_the_error_table_is_the_public_hierarchy() -> None:
    public = _public_errors()
    rows = _error_table()
    assert sorted(error for error, _, _ in rows) == sorted(public)
    listed: set[str] = set()
    for error, module, bases in rows:
        assert module == public[error][0], error
        cls = public[error][1]
        assert bases == [base.__name__ for base in cls.__bases__], error
        for base in cls.__mro__[1:]:
            assert base.__name__ not in public or base.__name__ in listed, f"{error} above {base}"
        listed.add(error)


if __name__ == "__main__":  # the subprocess of one document (`run_document`)
    run_blocks(blocks_of(Path(sys.argv[1])))


REGISTRY_INSTALL = re.compile(r"pip3?\s+install\s+(?:-\S+\s+)*['\"]?agent[-_]state", re.I)
"""`pip install agent-state[...]`: an install from a package index, where it is not."""


def test_no_doc_installs_from_a_package_index() -> None:
    """agent-state installs from a clone (`pip install -e '.[extra]'`), never by name."""
    texts = [*DOCUMENTS, *sorted((ROOT / "examples").glob("*.py"))]
    found = [
        f"{path.name}: {match.group(0)}"
        for path in texts
        for match in REGISTRY_INSTALL.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert "pip install -e '.[agui]'" in (ROOT / "docs" / "agui.md").read_text(encoding="utf-8")


def test_the_agui_extra_serves_the_agui_example() -> None:
    """`.[agui]` brings every package examples/agui_server.py imports (uvicorn included)."""
    requires = importlib.metadata.requires("agent-state") or []
    agui = " ".join(r for r in requires if "extra ==" not in r or 'extra == "agui"' in r)
    source = (ROOT / "examples" / "agui_server.py").read_text(encoding="utf-8")
    imported = set(re.findall(r"^\s*(?:import|from) (\w+)", source, re.M))
    for package in sorted(imported - set(sys.stdlib_module_names) - {"agent_state"}):
        assert package.replace("_", "-") in agui, f"{package} is not in the agui extra"
