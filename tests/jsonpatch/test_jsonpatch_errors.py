"""Typed errors: a malformed patch is a PatchFormatError, a refused one a PatchConflictError."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from agent_state.jsonpatch import (
    PatchConflictError,
    PatchFormatError,
    ProtocolError,
    apply_patch,
    validate_patch,
)
from tests.jsonpatch.jsonpatch_support import snapshot

ADD = {"op": "add", "path": "/a", "value": 1}


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param({"op": "add", "path": "/a", "value": 1}, id="patch-is-an-object"),
        pytest.param('[{"op": "add", "path": "/a", "value": 1}]', id="patch-is-a-string"),
        pytest.param(None, id="patch-is-null"),
        pytest.param([ADD, "add"], id="op-is-a-string"),
        pytest.param([ADD, ["add", "/a", 1]], id="op-is-an-array"),
        pytest.param([{"path": "/a", "value": 1}], id="missing-op"),
        pytest.param([{"op": "append", "path": "/a", "value": 1}], id="unknown-op"),
        pytest.param([{"op": "Add", "path": "/a", "value": 1}], id="op-wrong-case"),
        pytest.param([{"op": ["add"], "path": "/a", "value": 1}], id="op-not-a-string"),
        pytest.param([{"op": "remove"}], id="missing-path"),
        pytest.param([{"op": "remove", "path": 1}], id="path-not-a-string"),
        pytest.param([{"op": "remove", "path": ["a"]}], id="path-is-an-array"),
        pytest.param([{"op": "remove", "path": "a"}], id="path-without-leading-slash"),
        pytest.param([{"op": "remove", "path": "/a~2b"}], id="path-escape-tilde-2"),
        pytest.param([{"op": "remove", "path": "/a~"}], id="path-trailing-tilde"),
        pytest.param([{"op": "remove", "path": "/~/a"}], id="path-bare-tilde"),
        pytest.param([{"op": "add", "path": "/a"}], id="add-missing-value"),
        pytest.param([{"op": "replace", "path": "/a"}], id="replace-missing-value"),
        pytest.param([{"op": "test", "path": "/a"}], id="test-missing-value"),
        pytest.param([{"op": "move", "path": "/b"}], id="move-missing-from"),
        pytest.param([{"op": "copy", "path": "/b"}], id="copy-missing-from"),
        pytest.param([{"op": "move", "from": 3, "path": "/b"}], id="from-not-a-string"),
        pytest.param([{"op": "copy", "from": "a", "path": "/b"}], id="from-without-slash"),
        pytest.param([{"op": "copy", "from": "/a~3", "path": "/b"}], id="from-bad-escape"),
    ],
)
def test_malformed_patch_is_a_format_error(patch: Any) -> None:
    doc = {"a": 1}
    with pytest.raises(PatchFormatError):
        validate_patch(patch)
    for in_place in (False, True):
        with pytest.raises(PatchFormatError):
            apply_patch(doc, patch, in_place=in_place)
    assert doc == {"a": 1}


def test_format_error_found_before_anything_is_applied() -> None:
    """A malformed last operation stops the patch even though the first one could apply."""
    doc = {"a": 1}
    with pytest.raises(PatchFormatError, match="operation 1"):
        apply_patch(doc, [{"op": "remove", "path": "/a"}, {"op": "remove"}], in_place=True)
    assert doc == {"a": 1}


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param([], id="empty-patch"),
        pytest.param([{"op": "test", "path": "", "value": None}], id="null-value-is-present"),
        pytest.param([{**ADD, "extra": [1], "from": 7}], id="extra-members"),
        pytest.param([{"op": "remove", "path": "/a~01~10"}], id="good-escapes"),
        pytest.param([{"op": "remove", "path": "/"}], id="empty-token"),
        pytest.param([{"op": "remove", "path": "/a/01/-"}], id="index-syntax-is-not-checked"),
    ],
)
def test_well_formed_patch_validates(patch: Any) -> None:
    validate_patch(patch)


DOC = {"obj": {"k": 1, "t": True}, "arr": [10, 20, 30], "s": "text", "n": None}


@pytest.mark.parametrize(
    ("op", "reason"),
    [
        ({"op": "add", "path": "/missing/k", "value": 1}, "does not exist"),
        ({"op": "add", "path": "/arr/4", "value": 1}, "out of range"),
        ({"op": "add", "path": "/arr/01", "value": 1}, "not a valid array index"),
        ({"op": "add", "path": "/arr/-1", "value": 1}, "not a valid array index"),
        ({"op": "add", "path": "/arr/x", "value": 1}, "not a valid array index"),
        ({"op": "add", "path": "/s/k", "value": 1}, "cannot add"),
        ({"op": "add", "path": "/n/k", "value": 1}, "cannot add"),
        ({"op": "add", "path": "/s/k/deeper", "value": 1}, "cannot descend"),
        ({"op": "remove", "path": "/obj/missing"}, "does not exist"),
        ({"op": "remove", "path": "/arr/3"}, "out of range"),
        ({"op": "remove", "path": "/arr/-"}, "not a valid array index"),
        ({"op": "remove", "path": ""}, "whole document"),
        ({"op": "replace", "path": "/obj/missing", "value": 1}, "does not exist"),
        ({"op": "replace", "path": "/arr/-", "value": 1}, "not a valid array index"),
        ({"op": "replace", "path": "/arr/3", "value": 1}, "out of range"),
        ({"op": "test", "path": "/arr/-", "value": 30}, "not a valid array index"),
        ({"op": "test", "path": "/obj/missing", "value": 1}, "does not exist"),
        ({"op": "test", "path": "/obj/k", "value": True}, "test failed"),
        ({"op": "test", "path": "/obj/t", "value": 1}, "test failed"),
        ({"op": "test", "path": "/arr", "value": [10, 20]}, "test failed"),
        ({"op": "test", "path": "/obj", "value": {"k": 1}}, "test failed"),
        ({"op": "test", "path": "/s", "value": "Text"}, "test failed"),
        ({"op": "test", "path": "/n", "value": False}, "test failed"),
        ({"op": "move", "from": "/obj", "path": "/obj/child"}, "own children"),
        ({"op": "move", "from": "", "path": "/x"}, "own children"),
        ({"op": "move", "from": "/nope", "path": "/x"}, "does not exist"),
        ({"op": "move", "from": "/nope", "path": "/nope"}, "does not exist"),
        ({"op": "move", "from": "/arr/-", "path": "/x"}, "not a valid array index"),
        ({"op": "move", "from": "/obj/k", "path": "/missing/k"}, "does not exist"),
        ({"op": "copy", "from": "/nope", "path": "/x"}, "does not exist"),
        ({"op": "copy", "from": "/arr/-", "path": "/x"}, "not a valid array index"),
        ({"op": "copy", "from": "/arr/0", "path": "/arr/9"}, "out of range"),
    ],
    ids=lambda value: value if isinstance(value, str) else f"{value['op']}-{value['path']}",
)
@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "in-place"])
def test_conflict_names_the_failing_operation(
    op: dict[str, Any], reason: str, in_place: bool
) -> None:
    """Two good operations run first; the third fails, and the document is left as it was."""
    doc = {"obj": {"k": 1, "t": True}, "arr": [10, 20, 30], "s": "text", "n": None}
    before = snapshot(doc)
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/obj/new", "value": [1]},
        {"op": "remove", "path": "/arr/0"},
        op,
    ]
    with pytest.raises(PatchConflictError) as caught:
        apply_patch(doc, patch, in_place=in_place)
    assert caught.value.index == 2
    assert reason in caught.value.reason
    assert snapshot(doc) == before


def test_conflict_index_counts_from_zero_and_survives_pickling() -> None:
    with pytest.raises(PatchConflictError) as caught:
        apply_patch({}, [{"op": "remove", "path": "/a"}])
    assert caught.value.index == 0
    assert str(caught.value).startswith("operation 0:")
    copied = pickle.loads(pickle.dumps(caught.value))
    assert (copied.index, copied.reason, str(copied)) == (0, caught.value.reason, str(caught.value))


def test_error_hierarchy() -> None:
    """Callers can catch either kind, or both as ProtocolError; format errors are ValueErrors."""
    assert issubclass(PatchFormatError, ProtocolError)
    assert issubclass(PatchFormatError, ValueError)
    assert issubclass(PatchConflictError, ProtocolError)
    assert not issubclass(PatchConflictError, PatchFormatError)
    assert not issubclass(PatchFormatError, PatchConflictError)


def test_the_drop_unknown_mode_leaves_out_unknown_ops_only_and_stays_atomic() -> None:
    """AG-UI's rule as an explicit mode: an unknown string `op` is left out; RFC 6902's (the
    default) refuses it; a missing or non-string `op` is malformed in both."""
    patch: list[dict[str, Any]] = [
        ADD,
        {"op": "merge", "path": "/a"},
        {"op": "add", "path": "/b", "value": 2},
    ]
    with pytest.raises(PatchFormatError, match="unknown op 'merge'"):
        validate_patch(patch)
    assert validate_patch(patch, drop_unknown=True) == [1]
    assert apply_patch({}, patch, drop_unknown=True) == {"a": 1, "b": 2}
    for malformed in ({"path": "/a"}, {"op": 3, "path": "/a"}, {"op": None, "path": "/a"}):
        with pytest.raises(PatchFormatError):
            validate_patch([ADD, malformed], drop_unknown=True)
    doc = {"a": 0}
    with pytest.raises(PatchConflictError) as caught:  # the index names the original operation
        apply_patch(doc, [{"op": "frob"}, ADD, {"op": "remove", "path": "/x"}],
                    in_place=True, drop_unknown=True)  # fmt: skip
    assert caught.value.index == 2 and doc == {"a": 0}
