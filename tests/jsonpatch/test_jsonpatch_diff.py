"""make_patch: correct, short patches, JSON-strict comparison, and shared subtrees left unread."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import pytest

from agent_state.jsonpatch import apply_patch, make_patch
from tests.jsonpatch.jsonpatch_support import json_equal


def roundtrip(a: Any, b: Any) -> list[dict[str, Any]]:
    """Diff, check the patch really turns a into b, and return it."""
    patch = make_patch(a, b)
    assert json_equal(apply_patch(a, patch), b)
    return patch


class Untouchable:
    """A value that fails when compared or copied, to prove a subtree was skipped unread."""

    def __eq__(self, other: object) -> bool:
        raise AssertionError("a shared subtree was compared")

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise AssertionError("a shared subtree was copied")


def test_equal_documents_give_no_operations() -> None:
    doc = {"a": [1, {"b": [True, None, "x"]}], "c": 2.5}
    assert make_patch(doc, doc) == []
    assert make_patch(doc, copy.deepcopy(doc)) == []


@pytest.mark.parametrize(
    ("a", "b", "ops"),
    [
        (1, 1.0, 0),
        ({"x": [1, 2.0]}, {"x": [1.0, 2]}, 0),
        (1, True, 1),
        (True, 1, 1),
        (0, False, 1),
        ({"x": [1]}, {"x": [True]}, 1),
        ([{"x": 1}], [{"x": True}], 1),
        ([{"x": False}], [{"x": 0.0}], 1),
        ([False], [0], 1),
        (None, False, 1),
        ("1", 1, 1),
        ({}, [], 1),
    ],
)
def test_json_types_are_compared_strictly(a: Any, b: Any, ops: int) -> None:
    assert len(roundtrip(a, b)) == ops


def test_shared_subtrees_are_skipped_without_comparing() -> None:
    shared = {"deep": [Untouchable()]}
    a = {"s": shared, "list": [shared, 1], "v": 1}
    b = {"s": shared, "list": [shared, 2], "v": 2}
    assert make_patch(a, b) == [
        {"op": "replace", "path": "/list/1", "value": 2},
        {"op": "replace", "path": "/v", "value": 2},
    ]


def test_insert_at_the_front_is_one_operation() -> None:
    items = [{"id": i, "tags": ["t"]} for i in range(1000)]
    changed = [{"id": -1}, *copy.deepcopy(items)]
    assert roundtrip(items, changed) == [{"op": "add", "path": "/0", "value": {"id": -1}}]


def test_append_and_middle_removal_are_one_operation_each() -> None:
    items = list(range(100))
    assert roundtrip(items, [*items, 100]) == [{"op": "add", "path": "/100", "value": 100}]
    assert roundtrip(items, items[:50] + items[51:]) == [{"op": "remove", "path": "/50"}]


def test_shifted_list_is_aligned() -> None:
    items = [f"item{i}" for i in range(200)]
    assert len(roundtrip(items, [*items[1:], "new"])) == 2
    assert len(roundtrip(items, items[:10] + ["x", "y"] + items[10:150] + items[151:])) == 3


def test_field_edits_in_a_long_list_are_one_operation_each() -> None:
    records = [{"id": i, "name": f"n{i}", "score": i * 0.5} for i in range(10_000)]
    changed = copy.deepcopy(records)
    edited = range(7, 10_000, 100)
    for i in edited:
        changed[i]["score"] = -1
    patch = roundtrip(records, changed)
    assert patch == [{"op": "replace", "path": f"/{i}/score", "value": -1} for i in edited]


def test_huge_unrelated_lists_fall_back_to_positions() -> None:
    a = list(range(3000))
    b = [f"s{i}" for i in range(3500)]
    patch = roundtrip(a, b)
    assert len(patch) == 3500


def test_paths_are_escaped() -> None:
    patch = roundtrip({"a/b": {"~": 1}}, {"a/b": {"~": 2}, "~1": 0})
    assert {op["path"] for op in patch} == {"/a~1b/~0", "/~01"}


@pytest.mark.parametrize(
    "a",
    [{"lst": [], "t": 1}, {"lst": [0, 1], "t": 1}, [], "scalar"],
    ids=["adds", "replaces-in-list", "root-type-change", "root-scalar"],
)
def test_patch_values_do_not_alias_the_target(a: Any) -> None:
    b: dict[str, Any] = {"new": {"list": [1]}, "lst": [[2], [3]], "t": {"x": [4]}}
    patch = make_patch(a, b)
    before = copy.deepcopy(patch)
    b["new"]["list"].append(9)
    b["lst"][0].append(9)
    b["lst"][1].append(9)
    b["t"]["x"].append(9)
    assert patch == before


def test_root_changes() -> None:
    assert roundtrip({"a": 1}, [1]) == [{"op": "replace", "path": "", "value": [1]}]
    assert roundtrip("x", "y") == [{"op": "replace", "path": "", "value": "y"}]


def test_renamed_member_is_a_move() -> None:
    a = {"old": {"big": [1, 2, {"x": None}]}, "keep": 1}
    b = {"keep": 1, "new": copy.deepcopy(a["old"])}
    assert roundtrip(a, b) == [{"op": "move", "from": "/old", "path": "/new"}]


def test_dict_subclasses_and_member_order_are_handled() -> None:
    """Values marshal refuses, or whose bytes differ only by member order, still compare right."""
    a = [OrderedDict(x=1, y=[True]), {"p": 1, "q": 2}, 3]
    assert roundtrip(a, [{"x": 1, "y": [1]}, {"q": 2, "p": 1}, 3]) == [
        {"op": "replace", "path": "/0/y/0", "value": 1}
    ]
    assert make_patch(a, [{"y": [True], "x": 1.0}, {"q": 2, "p": 1}, 3]) == []
