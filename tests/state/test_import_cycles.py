"""The core of `agent_state` (the modules of `state/`, not its subpackages) imports without
circles: every import counts, those under `if TYPE_CHECKING:` and inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

STATE = Path(__file__).resolve().parents[2] / "state"


def _core_imports(source: str) -> set[str]:
    """The core modules (`_x`, by file stem) a core module's `source` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:  # `from . import _typed as typed`
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent_state."):
            found.add((node.module or "").split(".")[1])
    return found


def _graph() -> dict[str, set[str]]:
    modules = {path.stem: path for path in STATE.glob("*.py") if path.stem != "__init__"}
    return {
        name: _core_imports(path.read_text(encoding="utf-8")) & modules.keys()
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One path around each circle found by a depth-first walk (empty when there is none)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


SAMPLE = """
from typing import TYPE_CHECKING
from . import _typed as typed
from ._keys import user_key
from .backends import Storage
if TYPE_CHECKING:
    from ._turn_state import TurnState
def later():
    from agent_state._plan import Scopes
"""


def test_the_graph_sees_type_only_and_function_level_imports() -> None:
    assert _core_imports(SAMPLE) == {"_typed", "_keys", "backends", "_turn_state", "_plan"}
    assert "_turn_state" in _graph()["_lifecycle"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_core_has_no_import_circles() -> None:
    assert _cycles(_graph()) == []
