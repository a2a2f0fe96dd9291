"""Property tests: diff round trips, atomic failure in both modes, and copy-mode sharing."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_state.jsonpatch import PatchConflictError, ProtocolError, apply_patch, make_patch
from agent_state.jsonpatch._values import equal_flags, equal_prefix, equal_suffix
from agent_state.jsonpatch._values import json_equal as engine_json_equal
from tests.jsonpatch.jsonpatch_support import (
    containers,
    edited,
    json_equal,
    json_values,
    locations,
    lookup,
    operations,
    pointer,
    reordered,
    snapshot,
    twisted,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FAILING_LAST_OPS = [
    {"op": "test", "path": "", "value": {"a sentinel no document has": []}},
    {"op": "remove", "path": "/no such member/x"},
    {"op": "add", "path": "/no such member/x", "value": 1},
    {"op": "move", "from": "/no such member", "path": "/x"},
    {"op": "copy", "from": "/no such member", "path": "/x"},
    {"op": "replace", "path": "/no such member", "value": 1},
]


@st.composite
def similar_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    """(a, b) where b is an edit of a that shares a's unedited subtrees."""
    a = draw(json_values)
    return a, draw(edited(a))


@st.composite
def valid_patches(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    """A container document and a patch that applies to it, with every kind of operation."""
    doc = draw(containers)
    patch: list[dict[str, Any]] = []
    current = doc
    for op in draw(operations(doc, count=8)):
        try:
            current = apply_patch(current, [op])
        except ProtocolError:
            continue
        patch.append(op)
    return doc, patch


@SETTINGS
@given(similar_pairs())
def test_diff_round_trips_on_similar_documents(pair: tuple[Any, Any]) -> None:
    a, b = pair
    before_a, before_b = snapshot(a), snapshot(b)
    patch = make_patch(a, b)
    assert json_equal(apply_patch(a, patch), b)
    assert json_equal(apply_patch(copy.deepcopy(a), patch, in_place=True), b)
    assert (snapshot(a), snapshot(b)) == (before_a, before_b), "make_patch must not mutate"


@SETTINGS
@given(json_values, json_values)
def test_diff_round_trips_on_unrelated_documents(a: Any, b: Any) -> None:
    assert json_equal(apply_patch(a, make_patch(a, b)), b)


@SETTINGS
@given(similar_pairs())
def test_shared_subtrees_change_speed_not_the_patch(pair: tuple[Any, Any]) -> None:
    """Skipping shared subtrees by identity gives the same patch as comparing copies."""
    a, b = pair
    assert make_patch(a, b) == make_patch(a, copy.deepcopy(b))
    assert make_patch(a, copy.deepcopy(a)) == []


@SETTINGS
@given(valid_patches(), st.sampled_from(FAILING_LAST_OPS), st.booleans())
def test_failing_last_operation_leaves_the_document_unchanged(
    case: tuple[Any, list[dict[str, Any]]], failing: dict[str, Any], in_place: bool
) -> None:
    doc, patch = case
    reference = copy.deepcopy(doc)
    before = snapshot(doc)
    with pytest.raises(PatchConflictError) as caught:
        apply_patch(doc, [*patch, failing], in_place=in_place)
    assert caught.value.index == len(patch)
    assert snapshot(doc) == before
    assert json_equal(doc, reference)


@SETTINGS
@given(valid_patches())
def test_modes_agree_and_copy_mode_leaves_input_alone(
    case: tuple[Any, list[dict[str, Any]]],
) -> None:
    doc, patch = case
    before = snapshot(doc)
    copied = apply_patch(doc, patch)
    assert snapshot(doc) == before
    in_place = apply_patch(copy.deepcopy(doc), patch, in_place=True)
    assert json_equal(copied, in_place)


@SETTINGS
@given(st.data())
def test_copy_mode_shares_every_untouched_subtree(data: st.DataObject) -> None:
    """Replacing some locations copies exactly their ancestors; every other container is shared."""
    doc = data.draw(containers)
    spots = locations(doc)
    drawn = data.draw(st.lists(st.sampled_from(spots[1:] or spots), min_size=1, max_size=3))
    # Replacing a location and then something inside the new value would not test sharing.
    chosen = [t for t in set(drawn) if not any(o != t and t[: len(o)] == o for o in drawn)]
    patch = [{"op": "replace", "path": pointer(list(t)), "value": ["new"]} for t in chosen]
    result = apply_patch(doc, patch)
    for tokens in spots:
        old = lookup(doc, tokens)
        if not isinstance(old, (dict, list)):
            continue
        inside_replaced = any(tokens[: len(t)] == t for t in chosen)
        ancestor = any(t[: len(tokens)] == tokens for t in chosen)
        if inside_replaced:
            continue
        if ancestor:
            assert lookup(result, tokens) is not old, "a changed path must be copied"
        else:
            assert lookup(result, tokens) is old, "an untouched subtree must be shared"


def common_length(xs: list[Any], ys: list[Any]) -> int:
    """Reference for equal_prefix: count leading JSON-equal pairs one by one."""
    count = 0
    while count < min(len(xs), len(ys)) and json_equal(xs[count], ys[count]):
        count += 1
    return count


@SETTINGS
@given(st.lists(json_values, max_size=12), st.data())
def test_engine_equality_matches_the_reference(items: list[Any], data: st.DataObject) -> None:
    """The engine's fast equality (identity, marshal bytes, walk) agrees with the plain one."""
    variants = {
        "same": lambda x: x,
        "copy": copy.deepcopy,
        "twisted": twisted,
        "reordered": reordered,
    }
    others = [variants[data.draw(st.sampled_from(sorted(variants)))](item) for item in items]
    others = [data.draw(json_values) if data.draw(st.integers(0, 4)) == 0 else o for o in others]
    expected = [json_equal(x, y) for x, y in zip(items, others, strict=True)]
    assert [engine_json_equal(x, y) for x, y in zip(items, others, strict=True)] == expected
    assert equal_flags(items, others) == expected
    for xs, ys in [(items, others), (items, others[1:]), (items[2:], others)]:
        assert equal_prefix(xs, ys) == common_length(xs, ys)
        assert equal_suffix(xs, ys) == common_length(xs[::-1], ys[::-1])
    assert engine_json_equal(items, others) is all(expected)
