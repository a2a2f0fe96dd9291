"""Differential tests: StateMirror against the reference @ag-ui/client 1.0.0 reducer (npm).

Where the reference follows the rules, both end with identical state and messages; the known
divergences (docs/agui.md) are asserted as divergences, so a change on either side shows.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agui.support import json_equal, run_mirror, run_reference, streams

BATCH = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _describe(stream: dict[str, Any], result: dict[str, Any]) -> str:
    return f"stream={stream}\nreference={result}"


@BATCH
@given(st.lists(streams(), min_size=40, max_size=40))
def test_same_state_and_messages_as_the_reference(batch: list[dict[str, Any]]) -> None:
    results = run_reference(batch)
    for stream, result in zip(batch, results, strict=True):
        mirror, fatal, skipped = run_mirror(stream)
        why = _describe(stream, result)
        assert (fatal is None) == (result["error"] is None), why
        assert json_equal(mirror.state, result["state"]), why
        assert json_equal(mirror.messages, result["messages"]), why
        assert skipped == result["patchWarnings"], why


def _run(state: Any, *events: dict[str, Any], messages: Any = ()) -> dict[str, Any]:
    start = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
    return {"state": state, "messages": list(messages), "events": [start, *events]}


def _delta(*ops: Any) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


ADD_B = {"op": "add", "path": "/b", "value": 2}
BASE = {"a": 1, "l": [1, 2, 3]}
# name -> (stream, stream the reference should match, or None)
DIVERGENT: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "unknown-op": (
        _run(BASE, _delta(ADD_B, {"op": "merge", "path": "/a", "value": 0})),
        _run(BASE, _delta(ADD_B)),
    ),
    "missing-op": (
        _run(BASE, _delta({"path": "/a", "value": 0}, ADD_B)),
        _run(BASE, _delta(ADD_B)),
    ),
    "leading-zero-add": (
        _run(BASE, _delta({"op": "add", "path": "/l/01", "value": 9})),
        _run(BASE, _delta({"op": "add", "path": "/l/1", "value": 9})),
    ),
    "leading-zero-test": (
        _run(BASE, _delta({"op": "test", "path": "/l/01", "value": 2}, ADD_B)),
        _run(BASE, _delta(ADD_B)),
    ),
    "remove-root": (_run(BASE, _delta({"op": "remove", "path": ""})), _run(None)),
    "move-root-into-child": (_run(BASE, _delta({"op": "move", "from": "", "path": "/a"})), None),
    "move-missing-to-root": (_run(BASE, _delta({"op": "move", "from": "/zz", "path": ""})), None),
    "copy-past-the-end": (_run(BASE, _delta({"op": "copy", "from": "/a", "path": "/l/5"})), None),
    "move-past-the-end": (_run(BASE, _delta({"op": "move", "from": "/a", "path": "/l/5"})), None),
    "delta-on-a-scalar-state": (
        _run(
            BASE, {"type": "STATE_SNAPSHOT", "snapshot": ""}, _delta({"op": "remove", "path": "/a"})
        ),
        None,
    ),
    "duplicate-unseen-ids": (
        _run(
            {},
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [
                    {"id": "m1", "role": "user", "content": "first"},
                    {"id": "m2", "role": "user", "content": "other"},
                    {"id": "m1", "role": "user", "content": "last"},
                ],
            },
        ),
        None,
    ),
}


def test_known_divergences_from_the_reference() -> None:
    names = list(DIVERGENT)
    streams_ = [DIVERGENT[name][0] for name in names]
    twins = [DIVERGENT[name][1] or DIVERGENT[name][0] for name in names]
    results = dict(zip(names, run_reference(streams_ + twins), strict=False))
    twin_results = dict(zip(names, run_reference(twins), strict=True))
    mine = {name: run_mirror(DIVERGENT[name][0]) for name in names}

    # An operation with an unknown op: both drop it and apply the rest (the AG-UI rule).
    assert results["unknown-op"]["error"] is None
    assert results["unknown-op"]["state"] == {**BASE, "b": 2}
    mirror, fatal, _ = mine["unknown-op"]
    assert fatal is None and mirror.state == {**BASE, "b": 2}

    # The reference strips an operation with a missing op and applies the rest; the mirror
    # halts the run on it (malformed), keeping the state from before the delta.
    assert results["missing-op"]["error"] is None
    assert results["missing-op"]["state"] == twin_results["missing-op"]["state"] == {**BASE, "b": 2}
    mirror, fatal, _ = mine["missing-op"]
    assert fatal is not None and fatal.index == 0
    assert mirror.state == BASE and mirror.halted is fatal

    # The reference reads "01" as index 1 for add and test; for the mirror (RFC 6901) the
    # delta cannot apply: skipped, state unchanged, resync requested.
    for name in ("leading-zero-add", "leading-zero-test"):
        assert results[name]["state"] == twin_results[name]["state"] != BASE
        assert results[name]["patchWarnings"] == 0
        mirror, fatal, skipped = mine[name]
        assert fatal is None and skipped == 1 and mirror.needs_resync
        assert mirror.state == BASE

    # The reference lets `remove ""` delete the whole state; the mirror refuses it.
    assert results["remove-root"]["state"] is None and results["remove-root"]["patchWarnings"] == 0
    mirror, fatal, skipped = mine["remove-root"]
    assert mirror.state == BASE and skipped == 1 and mirror.needs_resync

    # The reference moves the whole state into one of its own members, making it circular.
    assert results["move-root-into-child"]["state"] == "<circular>"
    mirror, fatal, skipped = mine["move-root-into-child"]
    assert mirror.state == BASE and skipped == 1

    # The reference ignores a move onto the root from a location that does not exist, without a
    # warning; for the mirror the delta cannot apply.
    assert results["move-missing-to-root"]["state"] == BASE
    assert results["move-missing-to-root"]["patchWarnings"] == 0
    mirror, fatal, skipped = mine["move-missing-to-root"]
    assert fatal is None and skipped == 1 and mirror.needs_resync

    # The reference checks an array index against the length only for `add`; `copy` and `move`
    # to an index past the end append. For RFC 6902 the index is out of range.
    assert results["copy-past-the-end"]["state"] == {**BASE, "l": [1, 2, 3, 1]}
    assert results["move-past-the-end"]["state"] == {"l": [1, 2, 3, 1]}
    for name in ("copy-past-the-end", "move-past-the-end"):
        assert results[name]["patchWarnings"] == 0
        mirror, fatal, skipped = mine[name]
        assert fatal is None and skipped == 1 and mirror.needs_resync and mirror.state == BASE

    # After a snapshot that is no object or array, the reference applies a delta as property
    # operations on a JS primitive: they "succeed" without a warning; RFC 6902 refuses them.
    assert results["delta-on-a-scalar-state"]["state"] == ""
    assert results["delta-on-a-scalar-state"]["patchWarnings"] == 0
    mirror, fatal, skipped = mine["delta-on-a-scalar-state"]
    assert fatal is None and mirror.state == "" and skipped == 1 and mirror.needs_resync

    # One id twice in a snapshot: the reference appends both messages, the mirror keeps one
    # (the last occurrence's content at the first occurrence's place).
    assert [m["content"] for m in results["duplicate-unseen-ids"]["messages"]] == [
        "first",
        "other",
        "last",
    ]
    mirror, _, _ = mine["duplicate-unseen-ids"]
    assert [(m["id"], m["content"]) for m in mirror.messages] == [("m1", "last"), ("m2", "other")]
