"""Helpers for tests that start servers of their own: a free port, and stopping one."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen[str]) -> None:
    """Stop a server process (terminate, then kill after 10 s) and close its stderr pipe."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stderr is not None:
        process.stderr.close()
