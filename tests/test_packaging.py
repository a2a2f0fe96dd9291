"""The installed shape: one import root, a pinned public surface, no shadowing by user files."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import agent_state

ROOT = Path(__file__).resolve().parents[1]

PUBLIC_MODULES = {
    "agent_state": [
        "Activity", "ActivityClaimedError", "ActivityConflictError", "ActivityError",
        "AgentApplication", "AgentState", "AppState", "ChannelAccount", "ConversationAccount",
        "ConversationState", "DELIVERED",
        "History", "HistoryError", "MissingIdError", "ParsedKey", "Run",
        "Record", "RunConflictError", "RunStateError", "ScopeError", "Scopes", "Selection",
        "SessionState", "StateClosedError", "StateConflictError", "StateError", "StatePathError",
        "StateValidationError", "StateValueError", "TempState", "TurnContext", "TurnIds",
        "TurnQueues", "TurnState", "UndeclaredScopeError", "UserState", "accept_run",
        "add_event_listener", "app_key", "cancel_run", "check_message", "conversation_key",
        "edit_state", "escape_segment",
        "execute_run", "list_conversations", "list_users", "literal", "model_messages", "next_turn",
        "open_run", "open_state", "open_storage", "open_turn", "open_user", "parse_key",
        "read_state", "run_key", "session_key", "thread", "thread_index_key", "thread_owner_key",
        "thread_record_key", "thread_sent_key",
        "unescape_segment", "user_key", "write_group",
        "BackupReport", "RestoreReport", "IncompleteExportError", "UnlistableStoreError",
        "export_store", "import_store", "UnknownUserError", "UserDataReport", "export_user",
        "forget_user", "regroup", "RegroupReport", "earlier_write_group",
    ],
    "agent_state.backends": [
        "ANY", "BlobStorage", "CONFLICT", "ConflictError", "CosmosStorage", "Envelope",
        "FileStorage", "FormatError", "InvalidKeyError", "InvalidValueError", "MemoryStorage",
        "Outcomes", "PreparedWrite", "RedisStorage", "StateTooLargeError", "Storage",
        "StorageConfigError", "StorageError", "StorageUnavailableError", "StoreItem",
        "WriteGroup", "expired", "precondition_holds", "unavailable", "unwrap", "whole_key",
        "wrap",
    ],
    "agent_state.jsonpatch": [
        "DepthLimitError", "MAX_DEPTH", "PatchConflictError", "PatchFormatError",
        "ProtocolError", "apply_patch", "escape", "make_patch", "rebase_patch", "unescape",
        "validate_patch",
    ],
    "agent_state.backends.testing": ["Harness", "StorageContract", "create"],
    "agent_state.bridges": [],
    "agent_state.bridges.m365": [
        "AgentStateStorage", "ImportReport", "TurnQueueMiddleware", "import_m365_blobs",
        "import_m365_cosmos",
    ],
    "agent_state.bridges.adk": ["AgentStateSessionService"],
    "agent_state.cli": ["main"],
    "agent_state.telemetry": ["instrument", "uninstrument"],
    "agent_state.inspect": ["InspectorConfigError", "check_bind_host", "inspector_app"],
    "agent_state.agui": [
        "AGUIClient", "AGUIEndpoint", "AgentRun", "MalformedEventError", "MalformedPatchError",
        "RequestLimits", "RunHaltedError", "RunInputError", "RunInputTimeoutError",
        "RunInputTooLargeError", "RunLogGoneError", "RunLogLimits", "RunRefusedError",
        "SSEDecoder", "SkippedDelta", "StateMirror", "ThreadDeletingError", "ThreadNotFoundError",
        "ThreadOwnerError", "aiter_sse_events", "iter_sse_events",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES))
def test_public_names_are_pinned(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    if exported is None:  # a module without __all__: its public names are what it defines
        exported = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", None) == module_name
        ]
    assert sorted(exported) == sorted(PUBLIC_MODULES[module_name])
    for name in exported:
        assert getattr(module, name) is not None


def test_each_public_name_has_one_import_path() -> None:
    seen: dict[str, str] = {}
    for module_name, names in PUBLIC_MODULES.items():
        for name in names:
            assert name not in seen, f"{name} is public in {seen[name]} and {module_name}"
            seen[name] = module_name


def test_every_other_module_is_marked_internal() -> None:
    public = set(PUBLIC_MODULES)
    for info in pkgutil.walk_packages(agent_state.__path__, "agent_state."):
        if info.name in public:
            continue
        assert any(part.startswith("_") for part in info.name.split(".")[1:]), info.name


def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("agent_state-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"agent_state", next(t for t in top if t.endswith(".dist-info"))}
    assert "agent_state/backends/_memory.py" in names and "agent_state/jsonpatch/_apply.py" in names
    assert "agent_state/py.typed" in names and "agent_state/backends/py.typed" in names


README_BOT = """
import asyncio

from agent_state import AgentApplication, TurnContext, TurnState, open_storage

app = AgentApplication(open_storage("memory://"), app_name="my-bot")


@app.message("hello")
async def hello(ctx: TurnContext, state: TurnState) -> None:
    state["user:visits"] = state.get("user.visits", 0) + 1
    await ctx.send(f"Hello! Visit number {state['user:visits']}.")


activity = {
    "type": "message", "channelId": "msteams", "text": "hello",
    "from": {"id": "29:ada"}, "conversation": {"id": "19:team@thread.v2"},
}
for _ in range(2):
    print(asyncio.run(app.process(activity))[0].text)
"""


def test_a_bots_own_state_and_backends_modules_do_not_shadow_the_library(tmp_path: Path) -> None:
    (tmp_path / "state.py").write_text("raise ImportError('the user state.py was imported')\n")
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "__init__.py").write_text("raise ImportError('user backends')\n")
    (tmp_path / "bot.py").write_text(README_BOT)
    result = subprocess.run(
        [sys.executable, "bot.py"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Hello! Visit number 1.", "Hello! Visit number 2."]
