"""StateMirror state rules: snapshots replace, deltas patch in place and atomically, malformed
patches halt the run, unappliable ones are skipped and flag a resync; runs and their input."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from ag_ui.core import (
    EventType,
    RunAgentInput,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
)

from agent_state.agui import (
    MalformedEventError,
    MalformedPatchError,
    RunHaltedError,
    SkippedDelta,
    StateMirror,
)
from agent_state.jsonpatch import PatchConflictError, PatchFormatError, ProtocolError


def delta(*ops: Any) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def snapshot(value: Any) -> dict[str, Any]:
    return {"type": "STATE_SNAPSHOT", "snapshot": value}


@pytest.mark.parametrize("value", [None, 0, "s", [1, {"a": None}], {"only": True}])
def test_snapshot_replaces_the_state_without_merge(value: Any) -> None:
    mirror = StateMirror(state={"a": 1, "b": {"c": 2}})
    mirror.apply(snapshot(value))
    assert mirror.state == value and type(mirror.state) is type(value)


def test_snapshot_from_a_dict_is_copied() -> None:
    event = snapshot({"a": [1]})
    mirror = StateMirror()
    mirror.apply(event)
    event["snapshot"]["a"].append(2)
    assert mirror.state == {"a": [1]}


def test_models_and_wire_dicts_are_the_same_events() -> None:
    mirror = StateMirror()
    mirror.apply(StateSnapshotEvent(snapshot={"a": [1, 2]}))
    mirror.apply(StateDeltaEvent(delta=[{"op": "move", "from": "/a/0", "path": "/a/-"}]))
    assert mirror.state == {"a": [2, 1]}
    mirror.apply(
        {"type": EventType.STATE_DELTA, "delta": [{"op": "add", "path": "/b", "value": 3}]}
    )
    assert mirror.state == {"a": [2, 1], "b": 3}


def test_delta_patches_the_state_in_place_without_copying_it() -> None:
    big = {"items": [{"n": i, "tags": ["x"] * 5} for i in range(2000)], "meta": {"v": 1}}
    mirror = StateMirror(state=big)
    root, items, first = mirror.state, mirror.state["items"], mirror.state["items"][0]
    mirror.apply(delta({"op": "replace", "path": "/meta/v", "value": 2}))
    mirror.apply(delta({"op": "add", "path": "/items/0/tags/-", "value": "y"}))
    assert mirror.state is root and mirror.state["items"] is items and items[0] is first
    assert root["meta"] == {"v": 2} and first["tags"][-1] == "y"


def test_delta_is_all_or_nothing() -> None:
    mirror = StateMirror(state={"a": {"x": 1, "y": 2}, "l": [1, 2, 3]})
    before = json.dumps(mirror.state)
    mirror.apply(
        delta(
            {"op": "remove", "path": "/a/x"},
            {"op": "add", "path": "/a/x", "value": 9},
            {"op": "move", "from": "/l/0", "path": "/l/-"},
            {"op": "replace", "path": "/nope", "value": 1},
        )
    )
    assert json.dumps(mirror.state) == before  # member order included


MALFORMED = [
    pytest.param({"op": "add", "path": "/a"}, 0, id="not-a-list"),
    pytest.param([{"op": "add", "path": "/b", "value": 1}, 5], 1, id="op-not-an-object"),
    pytest.param([{"op": "add", "path": "/b", "value": 1}, {"path": "/a"}], 1, id="missing-op"),
    pytest.param([{"op": 3, "path": "/a"}], 0, id="op-not-a-string"),
    pytest.param([{"op": "remove", "path": "a"}], 0, id="pointer-without-slash"),
    pytest.param([{"op": "remove", "path": "/a~2"}], 0, id="pointer-bad-escape"),
    pytest.param([{"op": "remove", "path": 1}], 0, id="pointer-not-a-string"),
    pytest.param([{"op": "remove"}], 0, id="missing-path"),
    pytest.param([{"op": "add", "path": "/a"}], 0, id="add-without-value"),
    pytest.param([{"op": "replace", "path": "/a"}], 0, id="replace-without-value"),
    pytest.param([{"op": "test", "path": "/a"}], 0, id="test-without-value"),
    pytest.param([{"op": "move", "path": "/b"}], 0, id="move-without-from"),
    pytest.param([{"op": "copy", "path": "/b", "from": "b"}], 0, id="copy-bad-from"),
]


@pytest.mark.parametrize(("patch", "index"), MALFORMED)
def test_malformed_patch_halts_the_run(patch: Any, index: int) -> None:
    mirror = StateMirror(state={"a": 1})
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})
    event = {"type": "STATE_DELTA", "delta": patch}
    with pytest.raises(MalformedPatchError) as caught:
        mirror.apply(event)
    error = caught.value
    assert isinstance(error, PatchFormatError) and isinstance(error, ProtocolError)
    if isinstance(patch, list):
        assert error.index == index and error.operation is patch[index]
        assert f"operation {index}" in str(error)
    else:
        assert error.index is None and error.operation is None
    assert mirror.state == {"a": 1} and mirror.halted is error and not mirror.needs_resync
    with pytest.raises(RunHaltedError) as halted:
        mirror.apply(snapshot({"later": True}))
    assert halted.value.cause is error and halted.value.run_id == "r1"
    assert mirror.state == {"a": 1}


def test_delta_without_a_delta_member_is_malformed() -> None:
    with pytest.raises(MalformedPatchError, match="'delta'"):
        StateMirror().apply({"type": "STATE_DELTA"})


def test_a_new_run_accepts_events_again_after_a_fatal_one() -> None:
    mirror = StateMirror(state={"a": 1})
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})
    with pytest.raises(MalformedPatchError):
        mirror.apply(delta({"op": 3, "path": ""}))
    with pytest.raises(RunHaltedError):  # the same run again is still refused
        mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r2"})
    assert mirror.halted is None and mirror.run_id == "r2"
    mirror.apply(delta({"op": "add", "path": "/b", "value": 2}))
    assert mirror.state == {"a": 1, "b": 2}


def test_an_unknown_op_is_dropped_with_a_warning_and_the_rest_applies_atomically(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """AG-UI 1.x snapshots/deltas: an unrecognised operation is dropped, the run survives."""
    mirror = StateMirror(state={"a": 1})
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})
    mirror.apply(delta({"op": "add", "path": "/b", "value": 2},
                       {"op": "merge", "path": "/a", "value": 9},
                       {"op": "replace", "path": "/a", "value": 3}))  # fmt: skip
    assert mirror.state == {"a": 3, "b": 2} and mirror.halted is None
    assert "dropped the operations [1]" in caplog.text
    mirror.apply(delta({"op": "add", "path": "/c", "value": 1}, {"op": "frob"},
                       {"op": "remove", "path": "/missing"}))  # fmt: skip
    assert mirror.state == {"a": 3, "b": 2} and mirror.needs_resync  # all or nothing


def test_a_run_input_without_state_starts_the_mirror_from_an_empty_object() -> None:
    mirror = StateMirror(state={"left": "over"})
    started: dict[str, Any] = {"threadId": "t", "runId": "r2", "state": None, "messages": [],
                               "tools": [], "context": [], "forwardedProps": {}}  # fmt: skip
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r2", "input": started})
    assert mirror.state == {}
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r3"})  # no input: kept
    assert mirror.state == {}


UNAPPLIABLE = [
    pytest.param({"op": "remove", "path": "/missing"}, id="missing-path"),
    pytest.param({"op": "add", "path": "/missing/child", "value": 1}, id="missing-parent"),
    pytest.param({"op": "test", "path": "/n", "value": 2}, id="failed-test"),
    pytest.param({"op": "test", "path": "/flag", "value": 1}, id="test-true-is-not-1"),
    pytest.param({"op": "replace", "path": "/l/3", "value": 0}, id="index-out-of-range"),
    pytest.param({"op": "add", "path": "/l/4", "value": 0}, id="add-past-the-end"),
    pytest.param({"op": "replace", "path": "/l/01", "value": 0}, id="leading-zero-index"),
    pytest.param({"op": "add", "path": "/l/01", "value": 0}, id="leading-zero-add"),
    pytest.param({"op": "move", "from": "/n", "path": "/n/x"}, id="move-into-a-scalar"),
    pytest.param({"op": "remove", "path": ""}, id="remove-the-root"),
]


@pytest.mark.parametrize("op", UNAPPLIABLE)
def test_unappliable_delta_is_warned_skipped_and_flags_resync(
    op: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    skipped: list[SkippedDelta] = []
    resyncs: list[StateMirror] = []
    mirror = StateMirror(
        state={"n": 1, "flag": True, "l": [1, 2, 3]},
        on_skipped=skipped.append,
        on_resync=resyncs.append,
    )
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    with caplog.at_level(logging.WARNING, logger="agent_state.agui.mirror"):
        mirror.apply(delta({"op": "add", "path": "/new", "value": 1}, op))
    assert mirror.state == {"n": 1, "flag": True, "l": [1, 2, 3]}
    assert mirror.needs_resync and resyncs == [mirror] and mirror.halted is None
    assert len(skipped) == 1 and skipped[0].run_id == "r" and skipped[0].patch[1] is op
    assert isinstance(skipped[0].error, PatchConflictError) and skipped[0].error.index == 1
    assert any("skipped a STATE_DELTA" in record.getMessage() for record in caplog.records)
    mirror.apply(delta({"op": "add", "path": "/after", "value": 2}))  # the run goes on
    assert mirror.state["after"] == 2


def test_resync_hook_fires_once_until_a_snapshot_clears_the_flag() -> None:
    resyncs: list[StateMirror] = []
    mirror = StateMirror(state={}, on_resync=resyncs.append)
    bad = delta({"op": "remove", "path": "/x"})
    mirror.apply(bad)
    mirror.apply(bad)
    assert len(resyncs) == 1 and mirror.needs_resync
    mirror.apply(snapshot({"x": 1}))
    assert not mirror.needs_resync
    mirror.apply(delta({"op": "remove", "path": "/x"}))
    assert not mirror.needs_resync and mirror.state == {}
    mirror.apply(bad)
    assert len(resyncs) == 2 and mirror.needs_resync


def test_the_baseline_of_a_run_is_its_input_state() -> None:
    mirror = StateMirror(thread_id="t", state={"v": 1})
    run_input = mirror.next_input(run_id="r1")
    mirror.apply(snapshot({"changed": "locally"}))  # after the input was built
    mirror.start_run(run_input)
    assert mirror.state == {"v": 1} and mirror.run_id == "r1"
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})  # same run: no reset
    mirror.apply(delta({"op": "replace", "path": "/v", "value": 2}))
    assert mirror.state == {"v": 2}


def test_run_started_with_an_input_sets_the_baseline() -> None:
    mirror = StateMirror(thread_id="t", state={"old": True})
    echoed = RunAgentInput(thread_id="t", run_id="r2", state={"from": "input"}, messages=[])
    mirror.apply(RunStartedEvent(thread_id="t", run_id="r2", input=echoed))
    assert mirror.state == {"from": "input"}
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r3"})  # no input: kept
    assert mirror.state == {"from": "input"}


def test_state_persists_across_runs_and_feeds_the_next_input() -> None:
    mirror = StateMirror(thread_id="thread-1", state={"count": 0})
    for run in ("r1", "r2"):
        mirror.start_run(mirror.next_input(run_id=run))
        mirror.apply({"type": "RUN_STARTED", "threadId": "thread-1", "runId": run})
        mirror.apply(delta({"op": "replace", "path": "/count", "value": mirror.state["count"] + 1}))
        mirror.apply({"type": "RUN_FINISHED", "threadId": "thread-1", "runId": run})
    run_input = mirror.next_input(run_id="r3", forwarded_props={"k": 1})
    assert run_input.thread_id == "thread-1" and run_input.run_id == "r3"
    assert run_input.state == {"count": 2} and run_input.forwarded_props == {"k": 1}
    run_input.state["count"] = 99  # the input is a copy, not the live state
    assert mirror.state == {"count": 2}


def test_an_event_that_is_not_an_object_or_has_no_type_is_malformed() -> None:
    mirror = StateMirror()
    with pytest.raises(MalformedEventError):
        mirror.apply(["STATE_SNAPSHOT"])  # type: ignore[arg-type]
    mirror = StateMirror()
    with pytest.raises(MalformedEventError, match="type"):
        mirror.apply({"snapshot": 1})
    mirror = StateMirror()
    with pytest.raises(MalformedEventError, match="snapshot"):
        mirror.apply({"type": "STATE_SNAPSHOT"})


def test_events_that_change_nothing_are_ignored() -> None:
    mirror = StateMirror(state={"a": 1})
    for kind in ("STEP_STARTED", "CUSTOM", "RAW", "SOME_FUTURE_EVENT", "RUN_FINISHED"):
        mirror.apply({"type": kind, "stepName": "s", "name": "n", "value": 1, "event": {}})
    assert mirror.state == {"a": 1} and mirror.messages == [] and mirror.halted is None
