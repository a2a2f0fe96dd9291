"""The engine's limits give typed errors: deep values, huge indices, deep pointers."""

from __future__ import annotations

from typing import Any

import pytest

from agent_state.jsonpatch import (
    MAX_DEPTH,
    DepthLimitError,
    PatchConflictError,
    ProtocolError,
    apply_patch,
    make_patch,
)


def nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["a"] = {}
        node = node["a"]
    return root


@pytest.mark.parametrize("depth", [MAX_DEPTH + 5, 1_000, 10_000])
@pytest.mark.parametrize("in_place", [False, True])
def test_applying_a_too_deep_value_is_a_typed_error_and_changes_nothing(
    depth: int, in_place: bool
) -> None:
    doc = {"keep": [1]}
    for op in ("add", "replace"):
        patch: list[dict[str, Any]] = [
            {"op": "add", "path": "/n", "value": 1},
            {"op": op, "path": "/keep", "value": nested(depth)},
        ]
        with pytest.raises(DepthLimitError) as info:
            apply_patch(doc, patch, in_place=in_place)
        assert info.value.limit == MAX_DEPTH and str(MAX_DEPTH) in str(info.value)
        assert isinstance(info.value, ProtocolError)
        assert doc == {"keep": [1]}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 5, 10_000])
def test_testing_deep_values_never_overflows_the_stack(depth: int) -> None:
    doc = {"keep": nested(depth)}
    try:  # equal marshal bytes may prove equality without a walk; a walk stops at the limit
        apply_patch(doc, [{"op": "test", "path": "/keep", "value": nested(depth)}])
    except DepthLimitError:
        pass
    with pytest.raises((PatchConflictError, DepthLimitError)):
        apply_patch(doc, [{"op": "test", "path": "/keep", "value": nested(depth) | {"b": 1}}])


@pytest.mark.parametrize("depth", [MAX_DEPTH + 5, 10_000])
def test_diffing_too_deep_documents_is_a_typed_error(depth: int) -> None:
    with pytest.raises(DepthLimitError):
        make_patch({"x": nested(depth)}, {"x": nested(depth)})
    with pytest.raises(DepthLimitError):
        make_patch({}, {"x": nested(depth)})


def test_documents_at_the_limit_still_work() -> None:
    deep = nested(MAX_DEPTH - 1)
    patched = apply_patch({}, [{"op": "add", "path": "/x", "value": deep}])
    assert make_patch({}, patched) == [{"op": "add", "path": "/x", "value": deep}]


@pytest.mark.parametrize("token", ["9" * 5_000, "1" + "0" * 30])
def test_a_huge_list_index_is_out_of_range_not_a_crash(token: str) -> None:
    for op in (
        {"op": "replace", "path": f"/l/{token}", "value": 1},
        {"op": "remove", "path": f"/l/{token}"},
    ):
        with pytest.raises(PatchConflictError, match="out of range"):
            apply_patch({"l": [1]}, [op])


def test_a_very_deep_pointer_into_a_shallow_document_fails_fast() -> None:
    with pytest.raises(PatchConflictError):
        apply_patch({"a": {}}, [{"op": "replace", "path": "/a" * 10_000, "value": 1}])
