"""The bridges are a thin layer: `import agent_state` loads neither SDK, and the bridges use
only public names of `agent_state` and `agent_state.backends`."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

BRIDGES = Path(__file__).resolve().parents[2] / "state" / "bridges"


def test_importing_the_library_loads_no_framework_sdk() -> None:
    code = (
        "import sys, agent_state, agent_state.backends, agent_state.bridges\n"
        "loaded = [m for m in sys.modules if m.startswith(('microsoft_agents', 'google.adk'))]\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_bridges_use_only_public_names_of_the_library() -> None:
    checked = 0
    for path in sorted(BRIDGES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:  # relative: the bridges' own modules
                assert node.module is None or node.module.startswith("_"), path
                continue
            module = node.module or ""
            if module.split(".")[0] != "agent_state":
                continue
            assert module in ("agent_state", "agent_state.backends"), f"{path.name}: {module}"
            public = set(importlib.import_module(module).__all__)
            for alias in node.names:
                assert alias.name in public, f"{path.name} imports {module}.{alias.name}"
                checked += 1
    assert checked > 10
