"""Rebase analysis: which of our operations still apply after theirs, and where the two clash.

Both patches are made from one base document; a list counts as one value (its indices shift
under concurrent edits), so two changes inside one list always clash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ._pointer import escape, unescape


def rebase_patch(
    base: Any,
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    *,
    strict: bool = False,
    reads: Iterable[tuple[str, ...]] | None = (),
) -> tuple[list[dict[str, Any]], list[str]]:
    """Split our patch against theirs, both made from `base`: the ops still to apply, and clashes.

    Two changes clash when one's path is a prefix of the other's; a list counts as one value,
    since indices shift, and a `move` (a renamed member) touches its `from` as well as its
    `path`. An op theirs already made to a dict member is dropped, not a clash, unless
    `strict`: then it clashes too, since two read-modify-writes (two `n + 1`) can agree.
    `reads` are the paths (as steps) our changes were computed from (None: all of `base`):
    theirs touching one is a clash too, so a rebased result is always one that running our
    changes after theirs could give.
    """
    their_units = [unit for op in theirs for _, unit in _touched(base, op)]
    clashes: list[str] = []
    if their_units:
        read_units = [()] if reads is None else [_unit(base, steps) for steps in reads]
        for unit in read_units:
            if any(unit[: len(other)] == other[: len(unit)] for other in their_units):
                clashes.append(_pointer(unit))
    same = {_canonical(op) for op in theirs}
    keep: list[dict[str, Any]] = []
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
    return [(pointer, _unit(base, _steps(pointer))) for pointer in pointers]


def _steps(pointer: str) -> tuple[str, ...]:
    return tuple(unescape(token) for token in pointer.split("/")[1:])


def _pointer(steps: tuple[str, ...]) -> str:
    return "".join(f"/{escape(step)}" for step in steps)


def _unit(base: Any, steps: tuple[str, ...]) -> tuple[str, ...]:
    """The steps, cut at the first list that `base` has on the way."""
    node = base
    for depth, step in enumerate(steps):
        if isinstance(node, list):
            return steps[:depth]
        node = node.get(step) if isinstance(node, dict) else None
    return steps


def _canonical(op: dict[str, Any]) -> str:
    """A canonical form of an operation, to find the ones both patches made."""
    return json.dumps(op, sort_keys=True, allow_nan=True)
