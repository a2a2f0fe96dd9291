"""The demo page's client bundle: served from our own server, and a server without it
refuses to start with a message saying how to build it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.pages.conftest import ROOT


def test_the_page_routes_refuse_a_missing_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_STATE_AGUI_DIR", str(tmp_path / "state"))
    example = runpy.run_path(str(ROOT / "examples" / "agui_server.py"), run_name="agui_server")
    (tmp_path / "pages").mkdir()
    with pytest.raises(
        SystemExit, match=r"needs .*bundle/ag-ui-client\.js: run `bash examples/pages/build\.sh`"
    ):
        example["page_routes"](tmp_path / "pages")
    assert len(example["page_routes"]()) == 5  # the built one: /demo and its four files
