"""The public json-patch-tests suite through StateMirror: every error record is either malformed
(fatal) or unappliable (skipped, resync), as an independent structural check says, once the
operations of an unknown `op` are dropped (the AG-UI rule; the engine's own RFC 6902 suite
runs in tests/jsonpatch)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agent_state.agui import MalformedPatchError, StateMirror
from tests.agui.support import SUITE, json_equal, known_operations, malformed_operation

if not SUITE.is_dir():
    pytest.skip(f"json-patch-tests suite not found at {SUITE}", allow_module_level=True)


def _records(want_error: bool) -> list[Any]:
    params = []
    for name in ("tests.json", "spec_tests.json"):
        for number, record in enumerate(json.loads((SUITE / name).read_text())):
            if record.get("disabled") or ("error" in record) != want_error:
                continue
            params.append(pytest.param(record, id=f"{name.removesuffix('.json')}-{number}"))
    return params


ERRORS, VALID = _records(True), _records(False)


def test_both_kinds_of_error_records_are_present() -> None:
    kinds = [malformed_operation(param.values[0]["patch"]) is None for param in ERRORS]
    assert kinds.count(True) >= 10 and kinds.count(False) >= 5  # unappliable and malformed


@pytest.mark.parametrize("record", ERRORS)
def test_error_record(record: dict[str, Any]) -> None:
    skipped: list[object] = []
    mirror = StateMirror(state=copy.deepcopy(record["doc"]), on_skipped=skipped.append)
    before = json.dumps(mirror.state)
    bad = malformed_operation(record["patch"])
    patch = record["patch"]
    if isinstance(patch, list) and bad is None and known_operations(patch) != patch:
        mirror.apply({"type": "STATE_DELTA", "delta": patch})  # dropped: the rest applies
        twin = StateMirror(state=copy.deepcopy(record["doc"]))
        twin.apply({"type": "STATE_DELTA", "delta": known_operations(patch)})
        assert mirror.state == twin.state and mirror.halted is None
        return
    if bad is None:
        mirror.apply({"type": "STATE_DELTA", "delta": record["patch"]})
        assert len(skipped) == 1 and mirror.needs_resync and mirror.halted is None
    else:
        with pytest.raises(MalformedPatchError) as caught:
            mirror.apply({"type": "STATE_DELTA", "delta": record["patch"]})
        assert caught.value.index == (None if bad == -1 else bad)
        assert mirror.halted is caught.value and not skipped
    assert json.dumps(mirror.state) == before


@pytest.mark.parametrize("record", VALID)
def test_valid_record(record: dict[str, Any]) -> None:
    mirror = StateMirror(state=copy.deepcopy(record["doc"]))
    mirror.apply({"type": "STATE_DELTA", "delta": record["patch"]})
    assert not mirror.needs_resync and mirror.halted is None
    if "expected" in record:
        assert json_equal(mirror.state, record["expected"])
