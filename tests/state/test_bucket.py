"""AgentState: dict behaviour, JSON-only values, change detection and its RFC 6902 patch."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_state import (
    AgentState,
    ScopeError,
    StateConflictError,
    StateError,
    StateValueError,
    TempState,
    TurnIds,
    UserState,
)
from agent_state._bucket import document_of
from agent_state._paths import MISSING
from agent_state.backends import StoreItem
from agent_state.jsonpatch import apply_patch
from agent_state.jsonpatch._values import json_equal
from tests.strategies import JSON_SCALARS

FALSY = [0, 0.0, "", False, [], {}, None]


def loaded(document: dict[str, Any], etag: str = "1") -> UserState:
    """A user bucket as if read from storage (a fresh copy of `document`)."""
    return UserState("c/users/u", StoreItem(orjson.loads(orjson.dumps(document)), etag))


def blind(bucket: AgentState) -> dict[str, Any]:
    """The live document without recording a read: these tests exercise the write-write
    rules, which hold whatever a turn read (the read rules have their own tests below)."""
    edited: dict[str, Any] = document_of(bucket).edited()
    return edited


def snapshot(bucket: AgentState) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(document_of(bucket).document()))
    return copied


def canonical(value: object) -> bytes:
    """Strict JSON identity: key order ignored, true is not 1, 1.0 is not 1."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("value", FALSY)
def test_falsy_values_are_values(value: object) -> None:
    bucket = UserState()
    bucket["v"] = value
    assert "v" in bucket
    assert bucket["v"] == value and type(bucket["v"]) is type(value)
    assert bucket.get("v", "default") == value
    assert bucket.get("absent", "default") == "default"
    assert len(bucket) == 1 and list(bucket) == ["v"]


@pytest.mark.parametrize("value", FALSY)
def test_loaded_falsy_values_are_kept(value: object) -> None:
    bucket = loaded({"v": value})
    assert bucket.get("v", "default") == value
    assert not bucket.changed


def test_dict_interface() -> None:
    bucket = loaded({"a": 1, "b": 2})
    bucket.set("c", 3)
    bucket.delete("a")
    bucket.delete("never-there")
    del bucket["b"]
    with pytest.raises(KeyError):
        del bucket["b"]
    with pytest.raises(KeyError):
        bucket["missing"]
    assert dict(bucket) == {"c": 3}
    assert bucket.setdefault("d", []) == [] and bucket.pop("c") == 3
    bucket.update(e={"x": 1})
    assert dict(bucket.items()) == {"d": [], "e": {"x": 1}}
    bucket.clear()
    assert len(bucket) == 0 and bucket.changed


def test_data_is_the_live_dict() -> None:
    bucket = loaded({"a": {"b": 1}})
    bucket.data["a"]["b"] = 2
    assert bucket["a"] == {"b": 2} and bucket.changed
    bucket.data = {"fresh": True}
    assert dict(bucket) == {"fresh": True}
    with pytest.raises(StateValueError):
        bucket.data = ["not", "a", "dict"]


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        (1, 2),
        b"bytes",
        object(),
        datetime.date(2024, 1, 1),
        float("nan"),
        float("inf"),
        2**64,
        {1: "int key"},
        {"nested": [{"deep": {3}}]},
    ],
)
def test_non_json_values_are_refused_at_set_time(value: object) -> None:
    bucket = UserState()
    with pytest.raises(StateValueError):
        bucket["v"] = value
    with pytest.raises(StateValueError):
        bucket.data = {"v": value}
    assert "v" not in bucket
    assert isinstance(StateValueError("x"), (TypeError, StateError))


def test_non_json_values_slipped_in_place_fail_before_saving() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    for sneaky in (datetime.datetime(2024, 1, 1), Point(1), {2: "int key"}):
        bucket = loaded({"items": []})
        bucket["items"].append(sneaky)
        with pytest.raises(StateValueError):
            document_of(bucket).pending_write()


def test_non_str_keys_are_refused() -> None:
    with pytest.raises(StateValueError):
        UserState()[1] = "x"  # type: ignore[index]


def test_attribute_typos_do_not_silently_vanish() -> None:
    bucket = UserState()
    with pytest.raises(AttributeError):
        bucket.name = "Ada"  # type: ignore[attr-defined]

    class Custom(UserState):
        pass

    with pytest.raises(AttributeError):
        Custom().name = "Ada"  # type: ignore[attr-defined]


def test_untouched_and_read_only_buckets_are_unchanged() -> None:
    bucket = loaded({"a": {"b": [1, 2]}, "z": 0})
    assert (
        not bucket.changed
        and bucket.changes() == []
        and document_of(bucket).pending_write() is None
    )
    assert bucket["a"]["b"][1] == 2 and bucket.get("z") == 0 and list(bucket) == ["a", "z"]
    assert not bucket.changed and document_of(bucket).pending_write() is None


def test_a_bucket_that_handed_out_only_scalars_is_unchanged_without_a_comparison() -> None:
    """No in-place edit can follow a read of a scalar, so the save skips serializing the
    document: a document another writer stored in its own layout is not rewritten either."""
    raw = b'{ "name" : "Ada",  "visits": 3, "profile": {"langs": ["en"]} }'
    bucket = UserState("c/users/u", StoreItem(orjson.loads(raw), "1", raw))
    assert bucket.get("name") == "Ada" and bucket["visits"] == 3 and "plan" not in bucket
    assert bucket.get("plan", []) == [] and bucket.get_path(("profile", "x")) is MISSING
    assert not bucket.changed and document_of(bucket).pending_write() is None
    bucket.get("profile")["langs"].append("fr")  # a container handed out, edited in place
    item = document_of(bucket).pending_write()
    assert item is not None and item.value["profile"] == {"langs": ["en", "fr"]}


def test_new_empty_bucket_is_unchanged_until_written_to() -> None:
    bucket = UserState("c/users/u")
    assert bucket.get("x") is None and not bucket.changed
    bucket["x"] = 1
    item = document_of(bucket).pending_write()
    assert item is not None and item.value == {"x": 1} and item.etag is None


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["profile"].__setitem__("name", "Grace"),
        lambda d: d["profile"]["langs"].append("fr"),
        lambda d: d["profile"]["langs"].pop(0),
        lambda d: d["history"][1].__setitem__("seen", True),
        lambda d: d["history"].insert(0, {"seen": False}),
        lambda d: d["profile"].pop("name"),
        lambda d: d["profile"]["langs"].__setitem__(0, "de"),
        lambda d: d.__setitem__("count", 1),
        lambda d: d.__setitem__("flag", 0),
    ],
)
def test_nested_in_place_edits_are_detected_and_patched(
    edit: Callable[[dict[str, Any]], object],
) -> None:
    start = {
        "profile": {"name": "Ada", "langs": ["en"]},
        "history": [{"seen": False}, {"seen": False}],
        "count": 0,
        "flag": False,
    }
    bucket = loaded(start)
    edit(bucket.data)
    assert bucket.changed
    patch = bucket.changes()
    assert patch
    now = bucket.document()
    assert canonical(apply_patch(start, patch)) == canonical(now)
    assert canonical(jsonpatch.apply_patch(start, patch)) == canonical(now)


def test_changes_do_not_alias_the_live_document() -> None:
    bucket = loaded({})
    bucket["list"] = [1]
    patch = bucket.changes()
    bucket["list"].append(2)
    assert patch == [{"op": "add", "path": "/list", "value": [1]}]


def test_document_is_a_fresh_copy() -> None:
    bucket = loaded({"a": {"b": 1}})
    copy = bucket.document()
    copy["a"]["b"] = 99
    assert bucket["a"]["b"] == 1 and not bucket.changed


def test_mark_saved_moves_the_baseline_and_etag() -> None:
    bucket = loaded({"n": 1}, etag="7")
    bucket["n"] = 2
    item = document_of(bucket).pending_write()
    assert item is not None and item.etag == "7"
    document_of(bucket).mark_saved("8")
    assert bucket.etag == "8" and not bucket.changed and bucket.changes() == []
    bucket["n"] = 3
    assert bucket.changes() == [{"op": "replace", "path": "/n", "value": 3}]
    assert document_of(bucket).pending_write().etag == "8"


def test_mark_saved_needs_a_pending_write() -> None:
    with pytest.raises(StateError):
        document_of(loaded({})).mark_saved("2")


def test_load_starts_over() -> None:
    bucket = loaded({"n": 1})
    bucket["n"] = 2
    document_of(bucket).load(StoreItem({"n": 5}, "9"))
    assert bucket["n"] == 5 and bucket.etag == "9" and not bucket.changed


def test_rebase_merges_disjoint_changes() -> None:
    bucket = loaded({"plan": "free", "credits": 0, "tags": ["a"]}, etag="1")
    bucket["plan"] = "pro"
    document_of(bucket).rebase(StoreItem({"plan": "free", "credits": 10, "tags": ["a"]}, "2"))
    assert dict(bucket) == {"plan": "pro", "credits": 10, "tags": ["a"]}
    assert bucket.etag == "2" and bucket.changes() == [
        {"op": "replace", "path": "/plan", "value": "pro"}
    ]


@pytest.mark.parametrize("edit", [lambda d: d.__setitem__("plan", "pro"), lambda d: d.pop("plan")])
def test_rebase_skips_a_change_both_made(edit: Callable[[dict[str, Any]], object]) -> None:
    bucket = loaded({"plan": "free", "n": 1})
    edit(blind(bucket))
    theirs = snapshot(bucket)
    theirs["n"] = 2
    document_of(bucket).rebase(StoreItem(theirs, "2"))
    assert document_of(bucket).pending_write() is None and bucket.etag == "2" and bucket["n"] == 2


@pytest.mark.parametrize(
    ("ours", "theirs", "path"),
    [
        (lambda d: d.__setitem__("plan", "pro"), {"plan": "team", "tags": ["a"]}, "/plan"),
        (lambda d: d["tags"].append("b"), {"plan": "free", "tags": ["a", "c"]}, "/tags/1"),
        (lambda d: d["tags"].append("b"), {"plan": "free", "tags": ["a", "b"]}, "/tags/1"),
        (lambda d: d.__setitem__("tags", []), {"plan": "free", "tags": ["x"]}, "/tags/0"),
        (lambda d: d.pop("plan"), {"plan": "team", "tags": ["a"]}, "/plan"),
    ],
)
def test_rebase_refuses_changes_to_the_same_paths(
    ours: Callable[[dict[str, Any]], object], theirs: dict[str, Any], path: str
) -> None:
    bucket = loaded({"plan": "free", "tags": ["a"]})
    ours(blind(bucket))
    before = snapshot(bucket)
    with pytest.raises(StateConflictError) as info:
        document_of(bucket).rebase(StoreItem(theirs, "2"))
    assert info.value.paths == [path] and info.value.scopes == ["user"]
    assert snapshot(bucket) == before and bucket.etag == "1"


def _rename_draft(d: dict[str, Any]) -> None:
    d["final"] = d.pop("draft")  # an equal value under a new name: a JSON Patch "move"


@pytest.mark.parametrize(
    ("ours", "theirs", "path"),
    [
        # We renamed `draft` while they edited it: merging would store their edit as our
        # `final` and drop their `draft`.
        (_rename_draft, {"draft": {"t": "edited"}, "n": 1}, "/draft"),
        (_rename_draft, {"n": 1}, "/draft"),
        # They renamed `draft` while we edited it.
        (lambda d: d["draft"].update(t="ours"), {"final": {"t": "old"}, "n": 1}, "/draft/t"),
    ],
)
def test_rebase_counts_a_renamed_member_as_changed(
    ours: Callable[[dict[str, Any]], object], theirs: dict[str, Any], path: str
) -> None:
    bucket = loaded({"draft": {"t": "old"}, "n": 1})
    ours(blind(bucket))
    before = snapshot(bucket)
    with pytest.raises(StateConflictError) as info:
        document_of(bucket).rebase(StoreItem(theirs, "2"))
    assert info.value.paths == [path]
    assert snapshot(bucket) == before and bucket.etag == "1"


def test_rebase_keeps_a_rename_apart_from_their_changes() -> None:
    bucket = loaded({"draft": {"t": "old"}, "n": 1})
    _rename_draft(blind(bucket))
    document_of(bucket).rebase(StoreItem({"draft": {"t": "old"}, "n": 2}, "2"))
    assert dict(bucket) == {"n": 2, "final": {"t": "old"}}


@pytest.mark.parametrize(
    ("read", "path"),
    [
        (lambda b: b.get("credits"), "/credits"),
        (lambda b: b["credits"], "/credits"),
        (lambda b: "credits" in b, "/credits"),
        (lambda b: b.get_path(("limits", "daily")), "/limits/daily"),
        (lambda b: b.data, ""),
        (lambda b: list(b), ""),
        (lambda b: len(b), ""),
    ],
)
def test_rebase_refuses_when_they_changed_what_this_turn_read(
    read: Callable[[UserState], object], path: str
) -> None:
    """Write skew: we decided on `credits` (or everything) that they changed meanwhile."""
    bucket = loaded({"plan": "free", "credits": 0, "limits": {"daily": 1}})
    read(bucket)
    bucket["plan"] = "pro"
    with pytest.raises(StateConflictError) as info:
        document_of(bucket).rebase(
            StoreItem({"plan": "free", "credits": 10, "limits": {"daily": 2}}, "2")
        )
    assert path in info.value.paths and not info.value.retryable
    assert bucket["plan"] == "pro" and bucket.etag == "1"


def test_rebase_merges_when_what_this_turn_read_is_untouched() -> None:
    bucket = loaded({"plan": "free", "credits": 0, "limits": {"daily": 1}})
    assert bucket.get("plan") == "free" and bucket.get_path(("limits", "weekly")) is not None
    bucket["plan"] = "pro"
    document_of(bucket).rebase(
        StoreItem({"plan": "free", "credits": 10, "limits": {"daily": 1}}, "2")
    )
    assert dict(bucket) == {"plan": "pro", "credits": 10, "limits": {"daily": 1}}


def test_two_increments_never_merge_into_one() -> None:
    first, second = loaded({"n": 1}), loaded({"n": 1})
    first["n"] = first["n"] + 1
    second["n"] = second["n"] + 1
    with pytest.raises(StateConflictError):
        document_of(second).rebase(StoreItem(first.document(), "2"))


def test_rebase_of_an_untouched_bucket_just_loads() -> None:
    bucket = loaded({"a": 1})
    document_of(bucket).rebase(StoreItem({"a": 2}, "5"))
    assert bucket["a"] == 2 and bucket.etag == "5"


def test_temp_is_not_persisted_and_has_no_key() -> None:
    assert TempState.persisted is False and TempState().key is None
    with pytest.raises(ScopeError):
        TempState.key_for(TurnIds(channel_id="c"))


def test_scope_names_are_checked_when_the_class_is_made() -> None:
    with pytest.raises(ScopeError):

        class Bad(AgentState):
            scope = "Not An Identifier"


def test_model_must_be_a_pydantic_model() -> None:
    with pytest.raises(TypeError):

        class Bad(AgentState):
            scope = "bad"
            model = dict  # type: ignore[assignment]


_json = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
_edits = st.lists(
    st.tuples(st.integers(0, 1000), st.sampled_from(["set", "delete", "append"]), _json),
    max_size=6,
)


def _containers(node: dict[str, Any] | list[Any]) -> Iterator[dict[str, Any] | list[Any]]:
    yield node
    for child in node.values() if isinstance(node, dict) else node:
        if isinstance(child, (dict, list)):
            yield from _containers(child)


@given(st.dictionaries(st.text(max_size=3), _json, max_size=5), _edits)
def test_changes_replay_random_in_place_edits(
    start: dict[str, Any], edits: list[tuple[int, str, Any]]
) -> None:
    bucket = loaded(start)
    for pick, action, value in edits:
        containers = list(_containers(bucket.data))
        node = containers[pick % len(containers)]
        if isinstance(node, dict):
            if action == "delete" and node:
                del node[sorted(node)[pick % len(node)]]
            else:
                node[f"k{pick % 4}"] = value
        elif action == "delete" and node:
            node.pop(pick % len(node))
        elif action == "append" or not node:
            node.append(value)
        else:
            node[pick % len(node)] = value
    patch = bucket.changes()
    now = bucket.document()
    # JSON numbers compare by value (RFC 8259), so 2**53 and 2.0**53 need no patch op
    assert json_equal(apply_patch(start, patch), now)
    assert json_equal(jsonpatch.apply_patch(start, patch), now)
    if canonical(now) != canonical(start):
        assert bucket.changed and document_of(bucket).pending_write() is not None
    if not bucket.changed:
        assert patch == []
