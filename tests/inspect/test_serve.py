"""`agent-state serve`: the inspector is served only when asked, and only on loopback unless
--allow-remote (the command run as a user runs it; a served one is in tests/pages)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import cli, one_line_error


def test_serve_refuses_without_inspect(tmp_path: Path) -> None:
    error = one_line_error(cli("serve", store=f"file://{tmp_path}/store"))
    assert "pass --inspect" in error


def test_serve_refuses_a_host_beyond_loopback(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "192.168.1.10"):
        result = cli("serve", "--inspect", "--host", host, store=f"file://{tmp_path}/store")
        assert result.returncode == 2
        assert "--allow-remote" in one_line_error(result)
    assert not (tmp_path / "store").exists()  # refused before the store was opened
