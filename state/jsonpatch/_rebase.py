"""Rebase analysis: which of our operations still apply after theirs, and where the two clash.

Both patches are made from one base document; a list counts as one value (its indices shift
under concurrent edits), so two changes inside one list always clash.
"""

from __future__ import annotations

import json
from typing import Any

from ._pointer import unescape


def rebase_patch(
    base: Any,
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    *,
    strict: bool = False,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Split our patch against theirs, both made from `base`: the ops still to apply, and clashes.

    Two changes clash when one's path is a prefix of the other's; a list counts as one value,
    since indices shift, and a `move` (a renamed member) touches its `from` as well as its
    `path`. An op theirs already made to a dict member is dropped, not a clash, unless
    `strict`: then it clashes too, since two read-modify-writes (two `n + 1`) can agree.
    """
    their_units = [unit for op in theirs for _, unit in _touched(base, op)]
    same = {_canonical(op) for op in theirs}
    keep: list[dict[str, Any]] = []
    clashes: list[str] = []
    for op in ours:
        touched = _touched(base, op)
        if (
            not strict
            and _canonical(op) in same
            and all(len(u) == p.count("/") for p, u in touched)
        ):
            continue
        hits = [
            pointer
            for pointer, unit in touched
            if any(unit[: len(other)] == other[: len(unit)] for other in their_units)
        ]
        if hits:
            clashes.extend(pointer for pointer in hits if pointer not in clashes)
        else:
            keep.append(op)
    return keep, clashes


def _touched(base: Any, op: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """The pointers an op changes or reads from, each with its unit (see `_unit`)."""
    pointers = [op["path"]]
    if op["op"] in ("move", "copy"):
        pointers.insert(0, op["from"])
    return [(pointer, _unit(base, pointer)) for pointer in pointers]


def _unit(base: Any, pointer: str) -> tuple[str, ...]:
    """The steps of a pointer, cut at the first list that `base` has on the way."""
    steps = tuple(unescape(token) for token in pointer.split("/")[1:])
    node = base
    for depth, step in enumerate(steps):
        if isinstance(node, list):
            return steps[:depth]
        node = node.get(step) if isinstance(node, dict) else None
    return steps


def _canonical(op: dict[str, Any]) -> str:
    """A canonical form of an operation, to find the ones both patches made."""
    return json.dumps(op, sort_keys=True, allow_nan=True)
