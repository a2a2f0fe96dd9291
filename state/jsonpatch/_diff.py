"""Short RFC 6902 diffs: walk both documents once, skipping subtrees that they share by identity."""

from __future__ import annotations

import operator
from collections.abc import Hashable
from itertools import compress
from typing import Any

from ._align import Run, differing_runs
from ._errors import DepthLimitError
from ._pointer import escape
from ._values import (
    MAX_DEPTH,
    clone,
    equal_flags,
    equal_prefix,
    equal_suffix,
    fingerprint,
    json_equal,
    scalars_equal,
)

_MISSING = object()
_CONTAINERS = (dict, list)
_MAX_EDITS = 256  # Myers costs about (N+M)*D; past this many edits lists are diffed by position
_MAX_RENAME_CHECKS = 64  # removed x added members compared to find renamed ones


def make_patch(a: Any, b: Any) -> list[dict[str, Any]]:
    """Return a short patch that turns a into b; its values are copies, so it never aliases b."""
    ops: list[dict[str, Any]] = []
    _diff(a, b, "", ops, 0)
    return ops


def _diff(a: Any, b: Any, path: str, ops: list[dict[str, Any]], depth: int) -> None:
    """Append the operations that turn a into b at path (`depth` containers down)."""
    if a is b:
        return
    if depth > MAX_DEPTH:
        raise DepthLimitError(MAX_DEPTH)
    if isinstance(a, dict):
        if isinstance(b, dict):
            _diff_dicts(a, b, path, ops, depth)
            return
    elif isinstance(a, list):
        if isinstance(b, list):
            _diff_lists(a, b, path, ops, depth)
            return
    elif not isinstance(b, _CONTAINERS) and scalars_equal(a, b):
        return
    ops.append({"op": "replace", "path": path, "value": clone(b, depth)})


def _diff_dicts(
    a: dict[str, Any], b: dict[str, Any], path: str, ops: list[dict[str, Any]], depth: int
) -> None:
    """Recurse into or replace the common members, move renamed ones, remove and add the rest."""
    removed = []
    get = b.get
    for key, old in a.items():
        new = get(key, _MISSING)
        if new is old:
            continue
        if new is _MISSING:
            removed.append(key)
        elif isinstance(old, _CONTAINERS) or isinstance(new, _CONTAINERS):
            _diff(old, new, f"{path}/{escape(key)}", ops, depth + 1)
        elif not scalars_equal(old, new):
            ops.append({"op": "replace", "path": f"{path}/{escape(key)}", "value": new})
    added = [key for key in b if key not in a] if len(b) > len(a) - len(removed) else []
    if removed and added and len(removed) * len(added) <= _MAX_RENAME_CHECKS:
        for key in list(added):
            value = b[key]
            old_key = next((k for k in removed if json_equal(a[k], value)), None)
            if old_key is not None:
                removed.remove(old_key)
                added.remove(key)
                ops.append(
                    {
                        "op": "move",
                        "from": f"{path}/{escape(old_key)}",
                        "path": f"{path}/{escape(key)}",
                    }
                )
    for key in removed:
        ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
    for key in added:
        ops.append(
            {"op": "add", "path": f"{path}/{escape(key)}", "value": clone(b[key], depth + 1)}
        )


def _diff_lists(
    a: list[Any], b: list[Any], path: str, ops: list[dict[str, Any]], depth: int
) -> None:
    """Find the differing middle, split it into runs, then edit each run."""
    if len(a) == len(b):  # one positional pass finds every difference
        mismatched = _mismatches(a, b, 0, len(a))
        if not mismatched:
            return
        start, end_a = mismatched[0], mismatched[-1] + 1
        end_b = end_a
    else:
        start = equal_prefix(a, b)
        tail = equal_suffix(a[start:], b[start:])
        end_a, end_b = len(a) - tail, len(b) - tail
        mismatched = _mismatches(a, b, start, min(end_a, end_b))
    # Once a run is handled the list reads b[:j1] + a[i1:], so a[i1 + t] sits at index j1 + t.
    for i1, i2, j1, j2 in _runs(a, b, start, end_a, end_b, mismatched):
        paired = min(i2 - i1, j2 - j1)
        for t in range(paired):
            _diff(a[i1 + t], b[j1 + t], f"{path}/{j1 + t}", ops, depth + 1)
        at = f"{path}/{j1 + paired}"
        for _ in range(i2 - i1 - paired):
            ops.append({"op": "remove", "path": at})
        for j in range(j1 + paired, j2):
            ops.append({"op": "add", "path": f"{path}/{j}", "value": clone(b[j], depth + 1)})


def _mismatches(a: list[Any], b: list[Any], start: int, stop: int) -> list[int]:
    """Indices in [start, stop) where a and b differ, comparing by position."""
    flags = equal_flags(a[start:stop], b[start:stop])
    return list(compress(range(start, stop), map(operator.not_, flags)))


def _runs(
    a: list[Any], b: list[Any], start: int, end_a: int, end_b: int, mismatched: list[int]
) -> list[Run]:
    """Differing runs of a[start:end_a] and b[start:end_b], by position or aligned: fewer ops."""
    overlap = min(end_a, end_b)
    by_position = [(i, i + 1, i, i + 1) for i in mismatched]
    if end_a == end_b and 2 * len(mismatched) <= end_a - start:
        return by_position  # edits in place, nothing shifted
    if end_a != end_b:
        by_position.append((overlap, end_a, overlap, end_b))
    if start == overlap:
        return by_position  # pure insertion or removal
    aligned = differing_runs(*_alignment_keys(a[start:end_a], b[start:end_b]), _MAX_EDITS)
    if aligned is None:
        return by_position
    runs = [(start + i1, start + i2, start + j1, start + j2) for i1, i2, j1, j2 in aligned]
    aligned_cost = sum(max(i2 - i1, j2 - j1) for i1, i2, j1, j2 in runs)
    positional_cost = len(mismatched) + abs(end_a - end_b)
    return runs if aligned_cost < positional_cost else by_position


def _alignment_keys(xs: list[Any], ys: list[Any]) -> tuple[list[Hashable], list[Hashable]]:
    """Keys equal only for equal items: fingerprints, made once per object, else unique ids."""
    made: dict[int, Hashable] = {}

    def key(item: Any) -> Hashable:
        found = made.get(id(item))
        if found is None:
            printed = fingerprint(item)
            found = made[id(item)] = id(item) if printed is None else printed
        return found

    return list(map(key, xs)), list(map(key, ys))
