"""The package root is lazy (PEP 562): the storage layer and the patch engine load alone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import agent_state

ROOT = Path(__file__).resolve().parents[1]

LOADED = """
import json, sys
import {module}
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(module: str) -> list[str]:
    """The modules a fresh interpreter holds after importing `module` and nothing else."""
    result = subprocess.run(
        [sys.executable, "-c", LOADED.format(module=module)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    names: list[str] = json.loads(result.stdout)
    return names


@pytest.mark.parametrize("layer", ["agent_state.backends", "agent_state.jsonpatch"])
def test_a_lower_layer_loads_no_core_module_and_no_pydantic(layer: str) -> None:
    modules = loaded_after(layer)
    assert layer in modules
    project = [m for m in modules if m.split(".")[0] == "agent_state"]
    assert [m for m in project if m != "agent_state" and not m.startswith(layer)] == []
    assert [m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")] == []


def test_a_public_name_loads_its_module_on_first_access() -> None:
    modules = loaded_after("agent_state")
    assert [m for m in modules if m.startswith("agent_state.")] == []
    from agent_state import AgentApplication

    assert AgentApplication.__module__ == "agent_state._app"
    assert vars(agent_state)["AgentApplication"] is AgentApplication  # kept after first access


def test_dir_lists_every_public_name_and_a_misspelled_name_raises() -> None:
    assert set(agent_state.__all__) <= set(dir(agent_state))
    with pytest.raises(AttributeError, match="AgentApp"):
        _ = agent_state.AgentApp  # type: ignore[attr-defined]  # the misspelling is the point


def test_the_lazy_table_and_the_typing_imports_name_the_same_homes() -> None:
    """The runtime table and mypy's `if TYPE_CHECKING:` imports are two lists: pin them equal."""
    tree = ast.parse((ROOT / "state" / "__init__.py").read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            typed.update({alias.name: "." + node.module for alias in node.names})
    assert typed == agent_state._HOMES
    assert sorted(typed) == sorted(agent_state.__all__)
