"""tests/run.sh's port choice: a preferred port someone else holds is replaced, not fatal."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

PORTS_SCRIPT = Path(__file__).resolve().parent / "ports.sh"


def pick_port(preferred: int) -> int:
    """Run the test command's own `pick_port` with the interpreter running these tests."""
    script = (
        f'log() {{ :; }}; PY="{sys.executable}"; source "{PORTS_SCRIPT}"; pick_port {preferred}'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


def test_a_busy_preferred_port_is_replaced_by_a_free_one() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        chosen = pick_port(busy)
        assert chosen != busy
        with socket.socket() as probe:  # the chosen port is one nothing listens on
            probe.bind(("127.0.0.1", chosen))


def test_a_free_preferred_port_is_kept() -> None:
    with socket.socket() as finder:
        finder.bind(("127.0.0.1", 0))
        free = finder.getsockname()[1]
    assert pick_port(free) == free
