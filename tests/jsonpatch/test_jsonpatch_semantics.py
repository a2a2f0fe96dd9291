"""RFC 6902/6901 details of apply: escaping, roots, in-place identity, aliasing and rollback."""

from __future__ import annotations

from typing import Any

import pytest

from agent_state.jsonpatch import PatchConflictError, apply_patch, escape, unescape
from tests.jsonpatch.jsonpatch_support import json_equal, snapshot


@pytest.mark.parametrize(
    ("token", "escaped"),
    [("a", "a"), ("a/b", "a~1b"), ("m~n", "m~0n"), ("~1", "~01"), ("/~", "~1~0"), ("", "")],
)
def test_escape_round_trip(token: str, escaped: str) -> None:
    assert escape(token) == escaped
    assert unescape(escaped) == token


def test_unescape_order() -> None:
    """'~01' is '~' followed by '1', not '/' (RFC 6901 section 4)."""
    assert unescape("~01") == "~1"
    assert apply_patch({"~1": 5, "/": 6}, [{"op": "remove", "path": "/~01"}]) == {"/": 6}


def test_escaped_member_names() -> None:
    doc = {"a/b": {"m~n": 1}}
    result = apply_patch(doc, [{"op": "replace", "path": "/a~1b/m~0n", "value": 2}])
    assert result == {"a/b": {"m~n": 2}}


def test_test_compares_json_types_strictly() -> None:
    doc = {"i": 1, "f": 1.0, "b": True, "o": {"x": 1, "y": [True, 0]}}
    apply_patch(doc, [{"op": "test", "path": "/i", "value": 1.0}])
    apply_patch(doc, [{"op": "test", "path": "/f", "value": 1}])
    apply_patch(doc, [{"op": "test", "path": "/o", "value": {"y": [True, 0.0], "x": 1}}])
    refused = [
        ("/i", True),
        ("/b", 1),
        ("/o/y", [1, 0]),
        ("/o/y", [True, False]),
        ("", {**doc, "i": True}),
        ("", {**doc, "b": 1}),
    ]
    for path, value in refused:
        with pytest.raises(PatchConflictError):
            apply_patch(doc, [{"op": "test", "path": path, "value": value}])


def test_dash_appends_only_for_add() -> None:
    assert apply_patch([1], [{"op": "add", "path": "/-", "value": 2}]) == [1, 2]
    assert apply_patch({"-": 1}, [{"op": "replace", "path": "/-", "value": 2}]) == {"-": 2}


def test_leading_zero_is_a_member_name_in_objects() -> None:
    assert apply_patch({"01": 1}, [{"op": "remove", "path": "/01"}]) == {}
    with pytest.raises(PatchConflictError):
        apply_patch([1, 2], [{"op": "remove", "path": "/01"}])


@pytest.mark.parametrize("in_place", [False, True])
def test_root_replacement(in_place: bool) -> None:
    doc = {"a": 1}
    result = apply_patch(doc, [{"op": "replace", "path": "", "value": [1]}], in_place=in_place)
    assert result == [1]
    assert doc == {"a": 1}, "replacing the root changes no container of the caller"


def test_in_place_returns_the_same_root() -> None:
    doc = {"a": [1]}
    assert apply_patch(doc, [{"op": "add", "path": "/a/-", "value": 2}], in_place=True) is doc
    assert doc == {"a": [1, 2]}


def test_move_from_member_to_root() -> None:
    doc = {"a": {"b": 1}, "c": 2}
    assert apply_patch(doc, [{"op": "move", "from": "/a", "path": ""}]) == {"b": 1}
    assert doc == {"a": {"b": 1}, "c": 2}


def test_move_onto_itself_is_a_no_op() -> None:
    doc = {"a": {"b": 1}}
    assert apply_patch(doc, [{"op": "move", "from": "/a", "path": "/a"}]) == doc


def test_move_into_sibling_prefix_is_allowed() -> None:
    """'/ab' starts with the text '/a' but is not a child of '/a'."""
    result = apply_patch({"a": 1, "ab": {}}, [{"op": "move", "from": "/a", "path": "/ab/x"}])
    assert result == {"ab": {"x": 1}}


def test_move_within_an_array_uses_indices_after_removal() -> None:
    result = apply_patch([0, 1, 2, 3], [{"op": "move", "from": "/0", "path": "/3"}])
    assert result == [1, 2, 3, 0]


@pytest.mark.parametrize("in_place", [False, True])
def test_added_values_do_not_alias_the_patch(in_place: bool) -> None:
    value = {"deep": [1]}
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": "/a", "value": value},
        {"op": "replace", "path": "/b", "value": value},
        {"op": "add", "path": "/a/deep/-", "value": 2},
    ]
    before = snapshot(patch)
    result = apply_patch({"b": 0}, patch, in_place=in_place)
    assert result == {"a": {"deep": [1, 2]}, "b": {"deep": [1]}}
    assert snapshot(patch) == before
    result["b"]["deep"].append(3)
    assert value == {"deep": [1]}


@pytest.mark.parametrize("in_place", [False, True])
def test_copy_makes_an_independent_copy(in_place: bool) -> None:
    doc = {"a": {"x": [1]}}
    patch: list[dict[str, Any]] = [
        {"op": "copy", "from": "/a", "path": "/b"},
        {"op": "add", "path": "/b/x/-", "value": 2},
    ]
    result = apply_patch(doc, patch, in_place=in_place)
    assert result == {"a": {"x": [1]}, "b": {"x": [1, 2]}}
    assert result["a"]["x"] is not result["b"]["x"]


def test_copy_mode_copies_only_the_changed_path() -> None:
    doc: dict[str, Any] = {"left": {"deep": [1, 2]}, "right": {"x": {"y": 1}, "z": [0]}}
    result = apply_patch(doc, [{"op": "replace", "path": "/right/x/y", "value": 2}])
    assert doc["right"]["x"]["y"] == 1
    assert result["left"] is doc["left"]
    assert result["right"]["z"] is doc["right"]["z"]
    assert result is not doc and result["right"] is not doc["right"]
    assert result["right"]["x"] is not doc["right"]["x"]


def test_copy_mode_shares_moved_subtrees_until_they_change() -> None:
    doc: dict[str, Any] = {"a": {"x": {"y": 1}}, "b": {}}
    patch: list[dict[str, Any]] = [
        {"op": "move", "from": "/a", "path": "/b/a"},
        {"op": "add", "path": "/b/a/z", "value": 0},
    ]
    result = apply_patch(doc, patch)
    assert doc == {"a": {"x": {"y": 1}}, "b": {}}
    assert result == {"b": {"a": {"x": {"y": 1}, "z": 0}}}
    assert result["b"]["a"]["x"] is doc["a"]["x"]


def test_in_place_rollback_restores_member_order() -> None:
    doc = {"a": 1, "b": {"p": 1, "q": 2, "r": 3}, "c": [1, 2]}
    before = snapshot(doc)
    patch: list[dict[str, Any]] = [
        {"op": "remove", "path": "/b/p"},
        {"op": "move", "from": "/a", "path": "/b/a"},
        {"op": "replace", "path": "/b/q", "value": 9},
        {"op": "remove", "path": "/c/0"},
        {"op": "add", "path": "/c/0", "value": 5},
        {"op": "replace", "path": "/c/1", "value": 6},
        {"op": "copy", "from": "/b", "path": "/d"},
        {"op": "replace", "path": "", "value": {}},
        {"op": "add", "path": "/x", "value": 1},
        {"op": "test", "path": "/x", "value": 2},
    ]
    with pytest.raises(PatchConflictError) as caught:
        apply_patch(doc, patch, in_place=True)
    assert caught.value.index == 9
    assert snapshot(doc) == before
    assert json_equal(apply_patch(doc, patch[:-1], in_place=True), {"x": 1})
