"""JSON value helpers: strict RFC 8259 equality and cheap deep copies of plain dict/list trees."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import compress, repeat
from marshal import dumps as _dumps
from typing import Any

from ._errors import DepthLimitError

MAX_DEPTH = 254
"""Containers deep the engine walks (as deep as a stored document may nest); deeper raises."""

_MISSING = object()
_CONTAINERS = (dict, list)
_SCALARS = frozenset({str, int, float, bool})
# marshal format 2 writes no back-references and does not mark interned strings, so values that
# are equal, with the same types and member order, always get the same bytes.
_FORMAT = 2
_BATCH_FORMAT = 4  # twice as fast; back-references make it a proof only (see _same_bytes)


def json_equal(a: Any, b: Any) -> bool:
    """Compare as JSON does: true is not 1, 1 equals 1.0, objects ignore key order."""
    if a is b:
        return True
    if isinstance(a, _CONTAINERS):
        # Both checks run in C. Identical marshal bytes prove equality; Python's == holds
        # whenever JSON equality does (it only misses true vs 1), so failing it disproves it.
        if a.__class__ is b.__class__:
            printed = fingerprint(a)
            if printed is not None and printed == fingerprint(b):
                return True
        try:
            if a != b:
                return False
        except RecursionError:  # deeper than C's comparison goes: the walk below names it
            pass
    return _strict_equal(a, b)


def fingerprint(value: Any) -> bytes | None:
    """Bytes that only equal values share (see _FORMAT), or None for what marshal refuses."""
    try:
        return _dumps(value, _FORMAT)
    except ValueError:  # e.g. dict subclasses, or nested deeper than marshal goes
        return None


def equal_flags(xs: Sequence[Any], ys: Sequence[Any]) -> list[bool]:
    """json_equal of each pair (xs[i], ys[i]), run in C: identity, then Python's == (which
    disproves), then one marshal of all the pairs == found equal (which proves)."""
    flags = list(map(operator.is_, xs, ys))
    todo = list(compress(range(len(flags)), map(operator.not_, flags)))
    if not todo:
        return flags
    try:
        unequal = set(compress(todo, map(operator.ne, map(xs.__getitem__, todo),
                                         map(ys.__getitem__, todo))))  # fmt: skip
    except RecursionError:  # deeper than C's comparison goes: leave every pair to the proof
        unequal = set()
    candidates = [index for index in todo if index not in unequal]
    left, right = list(map(xs.__getitem__, candidates)), list(map(ys.__getitem__, candidates))
    if not _same_bytes(left, right):
        for index, equal in zip(candidates, _pairwise_equal(left, right), strict=True):
            flags[index] = equal
    else:
        for index in candidates:
            flags[index] = True
    return flags


def _same_bytes(left: list[Any], right: list[Any]) -> bool:
    """Whether marshal prints both lists alike: a proof of equality (never a disproof, since
    format 4 may print equal values differently when they share objects differently)."""
    try:
        return _dumps(left, _BATCH_FORMAT) == _dumps(right, _BATCH_FORMAT)
    except ValueError:
        return False


def _pairwise_equal(left: list[Any], right: list[Any]) -> list[bool]:
    """json_equal of each pair, byte-identical pairs proven in C."""
    try:
        same = list(
            map(
                operator.eq, map(_dumps, left, repeat(_FORMAT)), map(_dumps, right, repeat(_FORMAT))
            )
        )
    except ValueError:  # something marshal refuses; compare those pairs in Python
        same = [False] * len(left)
    for k in compress(range(len(left)), map(operator.not_, same)):
        same[k] = json_equal(left[k], right[k])
    return same


def equal_prefix(xs: Sequence[Any], ys: Sequence[Any]) -> int:
    """How many leading pairs of xs and ys are JSON-equal."""
    return _equal_run(xs, ys, from_end=False)


def equal_suffix(xs: Sequence[Any], ys: Sequence[Any]) -> int:
    """How many trailing pairs of xs and ys, aligned at their ends, are JSON-equal."""
    return _equal_run(xs, ys, from_end=True)


def _equal_run(xs: Sequence[Any], ys: Sequence[Any], *, from_end: bool) -> int:
    """Length of the common head or tail, checked in doubling batches."""
    # Batches keep the items' order: marshalling a reversed list walks memory backwards, slowly.
    limit, x_end, y_end = min(len(xs), len(ys)), len(xs), len(ys)
    done, batch = 0, 8
    while done < limit:
        stop = min(limit, done + batch)
        if from_end:
            left, right = xs[x_end - stop : x_end - done], ys[y_end - stop : y_end - done]
        else:
            left, right = xs[done:stop], ys[done:stop]
        # Whole batches are compared at once (shared items by identity) while they match.
        if not all(map(operator.is_, left, right)) and not json_equal(left, right):
            flags = equal_flags(left, right)
            if not all(flags):
                return done + (flags[::-1] if from_end else flags).index(False)
        done, batch = stop, batch * 2
    return limit


def _strict_equal(a: Any, b: Any, depth: int = 0) -> bool:
    """The walk behind json_equal, comparing same-typed scalar members without recursing."""
    if depth > MAX_DEPTH:
        raise DepthLimitError(MAX_DEPTH)
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        get = b.get
        for key, value in a.items():
            other = get(key, _MISSING)
            kind = value.__class__
            if kind is other.__class__ and kind in _SCALARS:
                if value != other:
                    return False
            elif value is not other and not _strict_equal(value, other, depth + 1):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        for value, other in zip(a, b, strict=True):
            kind = value.__class__
            if kind is other.__class__ and kind in _SCALARS:
                if value != other:
                    return False
            elif value is not other and not _strict_equal(value, other, depth + 1):
                return False
        return True
    return not isinstance(b, _CONTAINERS) and scalars_equal(a, b)


def scalars_equal(a: Any, b: Any) -> bool:
    """JSON scalar equality: true is not 1, but 1 is 1.0."""
    return (a.__class__ is bool) is (b.__class__ is bool) and a == b


def clone(value: Any, depth: int = 0) -> Any:
    """Deep-copy the dicts and lists of a JSON value, sharing its immutable scalars."""
    if depth > MAX_DEPTH:
        raise DepthLimitError(MAX_DEPTH)
    if isinstance(value, dict):
        return {key: clone(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [clone(item, depth + 1) for item in value]
    return value
