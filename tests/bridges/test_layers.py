"""The bridges are a thin layer: `import agent_state` loads neither SDK. (That they use only
public names of the library is one rule of tests/test_layers.py's layer table.)"""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_library_loads_no_framework_sdk() -> None:
    code = (
        "import sys, agent_state, agent_state.backends, agent_state.bridges\n"
        "loaded = [m for m in sys.modules if m.startswith(('microsoft_agents', 'google.adk'))]\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
