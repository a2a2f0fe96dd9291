"""Benchmark the AG-UI consumer: STATE_DELTA events applied per second on a 1 MB state.

Run from the repository root:  .venv/bin/python benchmarks/agui_consumer.py
Compares StateMirror with the reference @ag-ui/client 1.0.0 reducer (defaultApplyEvents, in
node, on the same events; AGENT_STATE_AGUI_CLIENT_DIR or .test-npm/agui, see
tests/services/agui_client.sh) and with the jsonpatch package's apply_patch (a copy per patch,
its default, and in place). Rounds are interleaved; the table shows medians. About 30 s.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch

from agent_state.agui import StateMirror

ROOT = Path(__file__).resolve().parents[1]
REDUCER = ROOT / "tests" / "agui" / "reference_reducer.mjs"
ROUNDS = 7
DELTAS = 200  # events per round for the fast consumers
COPYING_DELTAS = 5  # jsonpatch's default deep-copies the whole document for every patch


def make_state(target_bytes: int = 1_000_000) -> dict[str, Any]:
    """A ~1 MB state: many small records, as an agent's shared state grows."""
    items: list[dict[str, Any]] = []
    while len(json.dumps(items)) < target_bytes - 2_000:
        n = len(items)
        items.append({"id": n, "name": f"item {n}", "tags": ["a", "b", "c"], "payload": "x" * 200})
    return {"items": items, "counters": {f"k{j}": 0 for j in range(50)}}


def make_patch(k: int, size: int) -> list[dict[str, Any]]:
    """Ten operations of every kind; replaying the same patches keeps them all appliable."""
    item = f"/items/{(k * 7919) % size}"
    counter = f"/counters/k{k % 50}"
    return [
        {"op": "replace", "path": f"{item}/name", "value": f"renamed {k}"},
        {"op": "replace", "path": counter, "value": k},
        {"op": "test", "path": counter, "value": k},
        {"op": "add", "path": f"{item}/extra", "value": {"k": k, "list": [1, 2, 3]}},
        {"op": "remove", "path": f"{item}/extra"},
        {"op": "move", "from": f"{item}/tags/0", "path": f"{item}/tags/-"},
        {"op": "copy", "from": f"{item}/name", "path": f"{item}/alias"},
        {"op": "remove", "path": f"{item}/alias"},
        {"op": "add", "path": f"{item}/tags/0", "value": "z"},
        {"op": "remove", "path": f"{item}/tags/0"},
    ]


class ReferenceReducer:
    """A node process running the reference reducer; each round replays the loaded stream."""

    def __init__(self, client_dir: Path, state: Any, events: list[dict[str, Any]]) -> None:
        self._node = subprocess.Popen(
            ["node", str(REDUCER), str(client_dir), "bench"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._ask({"load": {"state": state, "events": events}})

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self._node.stdin is not None and self._node.stdout is not None
        self._node.stdin.write(json.dumps(command) + "\n")
        self._node.stdin.flush()
        answer: dict[str, Any] = json.loads(self._node.stdout.readline())
        return answer

    def seconds(self, *, enforce: bool) -> float:
        """One replay of the stream (its start clones the input state once, as runs do)."""
        seconds: list[float] = self._ask({"round": 1, "enforce": enforce})["seconds"]
        return seconds[0]

    def close(self) -> None:
        assert self._node.stdin is not None
        self._node.stdin.close()
        self._node.wait(timeout=30)


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def client_dir() -> Path | None:
    configured = os.environ.get("AGENT_STATE_AGUI_CLIENT_DIR")
    path = Path(configured) if configured else ROOT / ".test-npm" / "agui"
    found = (path / "node_modules" / "@ag-ui" / "client" / "package.json").is_file()
    return path if found and shutil.which("node") else None


def main() -> None:
    state = make_state()
    size = len(state["items"])
    patches = [make_patch(k, size) for k in range(DELTAS)]
    events = [{"type": "STATE_DELTA", "delta": patch} for patch in patches]
    mirror = StateMirror(state=state)
    copied_doc = copy.deepcopy(state)
    in_place_doc = copy.deepcopy(state)

    def run_mirror() -> None:
        for event in events:
            mirror.apply(event)

    def run_copying() -> None:
        nonlocal copied_doc
        for patch in patches[:COPYING_DELTAS]:
            copied_doc = jsonpatch.apply_patch(copied_doc, patch)

    def run_in_place() -> None:
        for patch in patches:
            jsonpatch.apply_patch(in_place_doc, patch, in_place=True)

    where = client_dir()
    reference = ReferenceReducer(where, state, events) if where else None
    rates: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        rates.setdefault("StateMirror", []).append(DELTAS / timed(run_mirror))
        if reference is not None:
            for name, enforce in (("reference reducer", False), ("reference + enforce", True)):
                rates.setdefault(name, []).append(DELTAS / reference.seconds(enforce=enforce))
        rates.setdefault("jsonpatch (copy)", []).append(COPYING_DELTAS / timed(run_copying))
        rates.setdefault("jsonpatch in place", []).append(DELTAS / timed(run_in_place))
    if reference is not None:
        reference.close()
    assert not mirror.needs_resync and mirror.state == in_place_doc

    ours = statistics.median(rates["StateMirror"])
    print(f"STATE_DELTA events (10 operations) on a {len(json.dumps(state)) / 1e6:.2f} MB state")
    print(f"{ROUNDS} interleaved rounds, medians\n")
    print(f"{'consumer':<24}{'deltas/s':>14}{'StateMirror is':>18}")
    for name, values in rates.items():
        rate = statistics.median(values)
        ratio = "" if name == "StateMirror" else f"{ours / rate:.1f}x"
        print(f"{name:<24}{rate:>14,.0f}{ratio:>18}")
    if reference is None:
        print("\nreference client: not installed (bash tests/run.sh installs it)")


if __name__ == "__main__":
    main()
