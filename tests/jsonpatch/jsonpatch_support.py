"""Shared test helpers: an independent strict JSON equality and Hypothesis JSON strategies."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st


def json_equal(a: Any, b: Any) -> bool:
    """RFC 8259 equality written independently of the engine: true != 1, 1 == 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(a[key], b[key]) for key in a)
        )
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def snapshot(doc: Any) -> str:
    """Exact serialization (member order and 1 vs 1.0 vs true included) to prove a doc unchanged."""
    return json.dumps(doc)


def pointer(tokens: list[str | int]) -> str:
    """Build a pointer by hand (independently of the engine's escape) from raw tokens."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def locations(doc: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every existing location in doc as token tuples, the root first."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += locations(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += locations(value, (*prefix, index))
    return found


def lookup(doc: Any, tokens: tuple[str | int, ...]) -> Any:
    """Follow raw tokens into doc."""
    for token in tokens:
        doc = doc[token]
    return doc


# Few distinct scalars so that equal values, and true next to 1 and 1.0, keep meeting.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 1.0, -2, 2.5, 10**20]),
    st.text("ab", max_size=2),
)
# Member names that need escaping ('~', '/'), look like indices ('0', '01') or are '-'.
keys = st.one_of(
    st.sampled_from(["", "-", "0", "01", "~", "/", "~1", "a/b~c"]), st.text("ab", max_size=2)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=25,
)
containers = st.one_of(
    st.lists(json_values, max_size=5), st.dictionaries(keys, json_values, max_size=5)
)


@st.composite
def edited(draw: st.DrawFn, value: Any) -> Any:
    """A version of value with random edits that shares every unedited subtree by identity."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(json_values)  # replaced outright
    if isinstance(value, dict):
        result = {}
        for key, item in value.items():
            fate = draw(st.integers(0, 5))
            if fate == 0:
                continue  # removed
            if fate == 1:
                key = draw(keys)  # renamed
            result[key] = draw(edited(item)) if fate == 2 else item
        for key in draw(st.lists(keys, max_size=2)):
            result[key] = draw(json_values)
        return result
    if isinstance(value, list):
        items: list[Any] = []
        for item in value:
            fate = draw(st.integers(0, 5))
            if fate == 0:
                continue
            if fate == 1:
                items.append(draw(json_values))  # inserted before
            items.append(draw(edited(item)) if fate == 2 else item)
        position = draw(st.integers(0, len(items)))
        items[position:position] = draw(st.lists(json_values, max_size=2))
        if len(items) > 1 and draw(st.booleans()):
            moved = items.pop(draw(st.integers(0, len(items) - 1)))
            items.insert(draw(st.integers(0, len(items))), moved)
        return items
    return value


@st.composite
def operations(draw: st.DrawFn, doc: Any, count: int = 4) -> list[dict[str, Any]]:
    """Random operations aimed mostly at doc's own locations, so many apply and many don't."""
    targets = [pointer(list(tokens)) for tokens in locations(doc)]
    for tokens in locations(doc):
        if isinstance(lookup(doc, tokens), list):
            size = len(lookup(doc, tokens))
            targets += [
                pointer([*tokens, "-"]),
                pointer([*tokens, size]),
                pointer(list(tokens)) + "/01",
            ]
    targets += ["/missing", "/missing/deeper", "/0", "/-"]
    paths = st.sampled_from(targets)
    ops = []
    for _ in range(draw(st.integers(1, count))):
        name = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        op: dict[str, Any] = {"op": name, "path": draw(paths)}
        if name in ("move", "copy"):
            op["from"] = draw(paths)
        if name in ("add", "replace"):
            op["value"] = draw(json_values)
        if name == "test":
            # Most tests look for the value that is there, a JSON-equal copy or a near miss.
            at = draw(st.sampled_from(locations(doc)))
            op["path"] = pointer(list(at))
            kind = draw(st.sampled_from(["same", "twisted", "other"]))
            if kind == "same":
                op["value"] = copy.deepcopy(lookup(doc, at))
            elif kind == "twisted":
                op["value"] = twisted(lookup(doc, at))
            else:
                op["value"] = draw(scalars)
        ops.append(op)
    return ops


def twisted(value: Any) -> Any:
    """A copy with true/false and 1/0 swapped: equal for Python, different for JSON."""
    if isinstance(value, dict):
        return {key: twisted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [twisted(item) for item in value]
    if isinstance(value, bool):
        return int(value)
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


def reordered(value: Any) -> Any:
    """A copy with every object's members in reverse order: JSON-equal, different bytes."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(value)}
    if isinstance(value, list):
        return [reordered(item) for item in value]
    return value
