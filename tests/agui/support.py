"""Shared helpers of the StateMirror tests: JSON equality, a structural patch check written
independently of the engine, the reference reducer runner and Hypothesis event streams."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from agent_state.agui import MalformedPatchError, StateMirror
from tests.conftest import server_missing

ROOT = Path(__file__).resolve().parents[2]
REDUCER = Path(__file__).with_name("reference_reducer.mjs")
SUITE = ROOT.parent / "shared" / "json-patch-tests"
_POINTER = re.compile(r"(/([^/~]|~[01])*)*")
_OPS = {"add", "remove", "replace", "move", "copy", "test"}


def json_equal(a: Any, b: Any) -> bool:
    """RFC 8259 equality: true is not 1, 1 is 1.0, object member order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def malformed_operation(patch: Any) -> int | None:
    """Index of the first structurally malformed operation (-1: the patch itself), else None;
    an operation whose `op` is a string naming no operation is not malformed for a consumer
    (AG-UI drops it: see `known_operations`)."""
    if not isinstance(patch, list):
        return -1
    for index, op in enumerate(known_operations(patch)):
        if not isinstance(op, dict) or op.get("op") not in _OPS:
            return index
        pointers = ["path"] + (["from"] if op["op"] in ("move", "copy") else [])
        for member in pointers:
            if not isinstance(op.get(member), str) or not _POINTER.fullmatch(op[member]):
                return index
        if op["op"] in ("add", "replace", "test") and "value" not in op:
            return index
    return None


def known_operations(patch: list[Any]) -> list[Any]:
    """The patch without the operations of an unknown string `op` (what AG-UI drops)."""
    return [op for op in patch if not (isinstance(op, dict) and isinstance(op.get("op"), str)
                                       and op["op"] not in _OPS)]  # fmt: skip


def client_dir() -> Path:
    """The npm install of @ag-ui/client 1.0.0 (tests/services/agui_client.sh makes it)."""
    configured = os.environ.get("AGENT_STATE_AGUI_CLIENT_DIR")
    path = Path(configured) if configured else ROOT / ".test-npm" / "agui"
    package = path / "node_modules" / "@ag-ui" / "client" / "package.json"
    if shutil.which("node") is None or not package.is_file():
        server_missing(f"the npm @ag-ui/client 1.0.0 (expected in {path}) with node")
    assert json.loads(package.read_text())["version"] == "1.0.0"
    return path


def run_reference(streams: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replay streams through the reference client's pipeline in one node process."""
    done = subprocess.run(
        ["node", str(REDUCER), str(client_dir()), "replay"],
        input=json.dumps(streams).encode(),
        capture_output=True,
        check=True,
        timeout=300,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(results) == len(streams)
    return results


def run_mirror(stream: dict[str, Any]) -> tuple[StateMirror, MalformedPatchError | None, int]:
    """Apply a stream to a fresh mirror: (mirror, the fatal error if any, skipped deltas)."""
    skipped: list[object] = []
    mirror = StateMirror(
        thread_id="t",
        state=stream["state"],
        messages=stream["messages"],
        on_skipped=skipped.append,
    )
    for event in stream["events"]:
        try:
            mirror.apply(event)
        except MalformedPatchError as exc:
            return mirror, exc, len(skipped)
    return mirror, None, len(skipped)


# Hypothesis strategies. Few distinct keys, indices and scalars so that paths keep meeting
# the values they address; no floats beyond JS's exact range, no "__proto__".
KEYS = ["a", "b", "c", "x/y", "t~"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "s"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=8,
)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)


def _token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


pointers = st.lists(
    st.one_of(st.sampled_from([_token(k) for k in KEYS]), st.sampled_from(["0", "1", "2", "-"])),
    max_size=3,
).map(lambda tokens: "".join("/" + token for token in tokens))


@st.composite
def operations(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed RFC 6902 operation (it may still not apply), never remove/move/copy at ""."""
    name = draw(st.sampled_from(sorted(_OPS)))
    op: dict[str, Any] = {"op": name, "path": draw(pointers)}
    if name in ("remove", "move", "copy") and not op["path"]:
        op["path"] = "/a"  # removing or moving onto the whole document: documented divergences
    if name in ("move", "copy"):
        if op["path"].endswith(("/1", "/2")):
            op["path"] = op["path"][:-1] + "-"  # past an array's end: a documented divergence
        op["from"] = draw(pointers)
        if name == "move" and not op["from"]:
            op["from"] = "/b"  # moving the whole document into itself: a documented divergence
    if name in ("add", "replace", "test"):
        # a scalar as the whole document would make later operations act on a scalar state,
        # where the reference's JS primitives diverge (documented, asserted on its own)
        root_write = not op["path"] and name != "test"
        op["value"] = draw(documents if root_write else values)
    return op


# Malformed patches the reference's schema refuses too (it stops the run, as the mirror does).
refused_patches = st.sampled_from(
    [
        [{"op": "add", "path": "/a"}],
        5,
        [7],
        [{"op": "move", "path": "/a"}],
        [{"op": "add", "path": "a", "value": 1}],
        [{"op": "remove", "path": "/a~2"}],
        [{"op": "copy", "from": 3, "path": "/a"}],
    ]
)

MESSAGE_IDS = ["m1", "m2", "m3", "m4"]
TOOL_IDS = ["t1", "t2"]


@st.composite
def messages(draw: st.DrawFn, message_id: str | None = None) -> dict[str, Any]:
    """A message in wire form, as pydantic dumps it (so that both sides keep it verbatim)."""
    ident = message_id or draw(st.sampled_from(MESSAGE_IDS))
    role = draw(st.sampled_from(["user", "assistant", "activity", "reasoning"]))
    text = draw(st.sampled_from(["hi", "there"]))
    if role == "activity":
        return {"id": ident, "role": role, "activityType": "plan", "content": {"step": text}}
    return {"id": ident, "role": role, "content": text}


@st.composite
def unique_snapshots(draw: st.DrawFn) -> list[dict[str, Any]]:
    """MESSAGES_SNAPSHOT contents with unique ids."""
    ids = draw(st.lists(st.sampled_from(MESSAGE_IDS), unique=True, max_size=4))
    return [draw(messages(ident)) for ident in ids]


@st.composite
def message_events(draw: st.DrawFn, serial: list[int]) -> dict[str, Any]:
    """A streamed message event (text or tool call) on ids from small pools."""
    kind = draw(
        st.sampled_from(
            ["TEXT_START", "TEXT_CONTENT", "TEXT_END", "TOOL_START"] * 2
            + ["TOOL_ARGS", "TOOL_END", "TOOL_RESULT"]
        )
    )
    message_id = draw(st.sampled_from(MESSAGE_IDS))
    tool_id = draw(st.sampled_from(TOOL_IDS))
    if kind == "TEXT_START":
        return {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}
    if kind == "TEXT_CONTENT":
        delta = draw(st.sampled_from(["a", "bc"]))
        return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}
    if kind == "TEXT_END":
        return {"type": "TEXT_MESSAGE_END", "messageId": message_id}
    if kind == "TOOL_START":
        event = {"type": "TOOL_CALL_START", "toolCallId": tool_id, "toolCallName": "f"}
        if draw(st.booleans()):
            event["parentMessageId"] = message_id
        return event
    if kind == "TOOL_ARGS":
        return {"type": "TOOL_CALL_ARGS", "toolCallId": tool_id, "delta": '{"q"'}
    if kind == "TOOL_END":
        return {"type": "TOOL_CALL_END", "toolCallId": tool_id}
    serial[0] += 1  # result ids are unique: a repeated one is a documented divergence
    return {
        "type": "TOOL_CALL_RESULT",
        "messageId": f"r{serial[0]}",
        "toolCallId": tool_id,
        "content": "ok",
    }


@st.composite
def streams(draw: st.DrawFn, *, refused: bool = True) -> dict[str, Any]:
    """One run: a start state and messages, then events the mirror and the reference agree on."""
    serial = [0]
    state_event = st.one_of(
        st.lists(operations(), min_size=1, max_size=4).map(
            lambda patch: {"type": "STATE_DELTA", "delta": patch}
        ),
        # (objects and arrays: a delta on a scalar state is a documented divergence)
        documents.map(lambda doc: {"type": "STATE_SNAPSHOT", "snapshot": doc}),
    )
    choices = [
        state_event,
        state_event,
        unique_snapshots().map(lambda items: {"type": "MESSAGES_SNAPSHOT", "messages": items}),
        message_events(serial),
    ]
    if refused:
        choices.append(refused_patches.map(lambda patch: {"type": "STATE_DELTA", "delta": patch}))
    events = draw(st.lists(st.one_of(choices), max_size=8))
    return {
        "state": draw(documents),
        "messages": draw(unique_snapshots()),
        "events": [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}, *events],
    }
