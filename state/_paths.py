"""Addressing inside a document: dotted paths over dicts, lists and models, and JSON checks.

A path step into a dict is a member name, into a list a non-negative index, into a pydantic
model a field name. Lookups return `MISSING` for an absent member; a step into anything else
(a str, a number, None) raises `StatePathError`, so a wrong path is never mistaken for "absent".
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel

from ._errors import StatePathError, StateValueError
from .backends._json import JsonRuleError
from .backends._json import check_json as json_rule

_MAX_INDEX_DIGITS = 18

MISSING: Any = object()
"""Returned by lookups for a member that does not exist (None is a value, not a miss)."""


def split_path(path: str) -> tuple[str, ...]:
    """Split `"a.b.0"` into its steps; raises `StatePathError` for an empty path or step."""
    if not isinstance(path, str) or not path:
        raise StatePathError(f"a path must be a non-empty str, got {path!r:.80}")
    parts = tuple(path.split("."))
    if "" in parts:
        raise StatePathError(f"path {path!r:.80} has an empty step")
    return parts


def child(node: Any, step: str) -> Any:
    """Return the member `step` of a container, or `MISSING` when it has none."""
    if isinstance(node, dict):
        return node.get(step, MISSING)
    if isinstance(node, list):
        index = _index(step)
        return node[index] if index < len(node) else MISSING
    if isinstance(node, BaseModel):
        if step in type(node).model_fields:
            return getattr(node, step)
        extra = node.__pydantic_extra__
        return extra.get(step, MISSING) if extra else MISSING
    raise StatePathError(f"cannot look up {step!r} in {_kind(node)}")


def put(node: Any, step: str, value: Any) -> None:
    """Set the member `step` of a container (JSON values only in dicts and lists)."""
    if isinstance(node, dict):
        if not isinstance(step, str):
            raise StateValueError(f"state keys must be str, got {type(step).__name__}")
        check_json(value)
        node[step] = value
    elif isinstance(node, list):
        index = _index(step)
        if index >= len(node):
            raise StatePathError(f"index {step:.20} is out of range for a list of {len(node)}")
        check_json(value)
        node[index] = value
    elif isinstance(node, BaseModel):
        model = type(node)
        if step not in model.model_fields and model.model_config.get("extra") != "allow":
            raise StatePathError(f"{model.__name__} has no field {step!r}")
        setattr(node, step, value)
    else:
        raise StatePathError(f"cannot set {step!r} in {_kind(node)}")


def drop(node: Any, step: str) -> bool:
    """Remove the member `step` of a dict or list; return whether it existed."""
    if isinstance(node, dict):
        return node.pop(step, MISSING) is not MISSING
    if isinstance(node, list):
        index = _index(step)
        if index < len(node):
            del node[index]
            return True
        return False
    if isinstance(node, BaseModel):
        raise StatePathError(
            f"cannot delete field {step!r} of {type(node).__name__}; set it to a value instead"
        )
    raise StatePathError(f"cannot delete {step!r} from {_kind(node)}")


def members(node: Any) -> list[str]:
    """The member names of a bucket's root: a dict's keys or a model's fields and extras."""
    if isinstance(node, BaseModel):
        return [*type(node).model_fields, *(node.__pydantic_extra__ or ())]
    return list(node)


def get_in(root: Any, parts: tuple[str, ...]) -> Any:
    """Follow `parts` from `root`; `MISSING` when a member on the way is absent."""
    node = root
    for depth, step in enumerate(parts):
        node = node.get(step, MISSING) if type(node) is dict else _step(node, step, parts, depth)
        if node is MISSING:
            return MISSING
    return node


def set_in(root: Any, parts: tuple[str, ...], value: Any) -> None:
    """Set the value at `parts`, creating missing intermediate dicts."""
    node = root
    for depth, step in enumerate(parts[:-1]):
        nxt = _step(node, step, parts, depth)
        if nxt is MISSING:
            if not isinstance(node, dict):
                raise StatePathError(f"path {'.'.join(parts)!r} has no member {step!r} to enter")
            nxt = node[step] = {}
        node = nxt
    _at(put, node, parts, value)


def delete_in(root: Any, parts: tuple[str, ...]) -> bool:
    """Remove the value at `parts`; return whether it existed."""
    parent = get_in(root, parts[:-1])
    return parent is not MISSING and _at(drop, parent, parts)


def check_json(value: Any) -> None:
    """Raise `StateValueError` unless `value` is JSON by the storage's one rule."""
    try:
        json_rule(value)
    except JsonRuleError as exc:
        raise StateValueError(f"not a JSON value: {exc}") from None


def _step(node: Any, step: str, parts: tuple[str, ...], depth: int) -> Any:
    """One `child` step that names the whole path and the failing step in its error."""
    try:
        return child(node, step)
    except StatePathError as exc:
        raise _path_error(parts, depth, exc) from None


def _at(action: Any, node: Any, parts: tuple[str, ...], *value: Any) -> Any:
    """Apply `put` or `drop` at the last step, naming the whole path in its error."""
    try:
        return action(node, parts[-1], *value)
    except StatePathError as exc:
        raise _path_error(parts, len(parts) - 1, exc) from None


def _path_error(parts: tuple[str, ...], depth: int, exc: StatePathError) -> StatePathError:
    where = ".".join(parts[:depth])[:80] or "the bucket root"
    return StatePathError(f"path {'.'.join(parts)[:80]!r} fails at {where!r}: {exc}")


def _index(step: str) -> int:
    if isinstance(step, str) and step.isdigit() and step.isascii():
        # past any list's length (and int() refuses 5,000 digits): out of range like any other
        return int(step) if len(step) <= _MAX_INDEX_DIGITS else sys.maxsize

    raise StatePathError(f"{step!r:.80} is not a list index")


def _kind(node: Any) -> str:
    return "null" if node is None else f"a {type(node).__name__}"
