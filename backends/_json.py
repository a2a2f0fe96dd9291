"""The one JSON rule every stored value meets, on every path into storage.

A value is JSON when it is built of dicts with str keys, lists, str, bool, None, ints that
fit in 64 bits and finite floats, at most `MAX_DEPTH` containers deep. Anything else (NaN,
±Infinity, tuples, sets, non-str keys, datetime, UUID, Enum, Decimal, dataclasses, pydantic
models, cycles) is refused: `encode_json` serializes with orjson and proves the bytes decode
back to an equal value, so nothing is stored as something else (a tuple as a list, a NaN as
null, an Enum as its value).
"""

from __future__ import annotations

import marshal
from typing import Any

import orjson

MAX_DEPTH = 254
"""How many containers deep a stored value may nest (orjson's own limit)."""

DUMP_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
DUMP_OPTIONS |= orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson options that refuse (rather than convert) datetimes, dataclasses and subclasses."""
_SCALARS = (str, bool, type(None))


def encode_json(value: Any) -> bytes:
    """`orjson.dumps(value)` for a value that is JSON by the rule above; else `JsonRuleError`
    naming the first offending place."""
    try:  # `_dumped` and `_decoded`, inline: every turn checks its activity and replies here
        data = orjson.dumps(value, option=DUMP_OPTIONS)
        if orjson.loads(data) == value:
            marshal.dumps(value)
            return data
    except (TypeError, ValueError):
        pass
    check_encoded(value, _dumped(value))  # raises, naming the place
    raise JsonRuleError("it does not survive a JSON round trip")


def copy_json(value: Any) -> Any:
    """A copy of `value` decoded from its JSON, if it is JSON by the rule above (the check's
    own decode is the copy); else `JsonRuleError`."""
    return _decoded(value, _dumped(value))


def copy_json_encoded(value: Any) -> tuple[Any, bytes]:
    """`copy_json(value)` and the JSON bytes it was decoded from (for a caller that writes
    them as part of a larger document)."""
    data = _dumped(value)
    return _decoded(value, data), data


def check_encoded(value: Any, data: bytes) -> None:
    """Raise `JsonRuleError` unless `data` (orjson's bytes of `value`) decodes back to an equal
    value of the exact built-in types: a NaN, tuple, UUID or Enum (an IntEnum compares equal
    to its int) would have gone out as something else."""
    _decoded(value, data)


def _dumped(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=DUMP_OPTIONS)
    except TypeError as exc:
        raise JsonRuleError(_explain(value) or str(exc)) from None


def _decoded(value: Any, data: bytes) -> Any:
    """`data` decoded, if it is the JSON of `value` by the rule (see `check_encoded`)."""
    decoded = orjson.loads(data)
    if decoded != value or not _builtin_types_only(value):
        raise JsonRuleError(_explain(value) or "it does not survive a JSON round trip")
    return decoded


def _builtin_types_only(value: Any) -> bool:
    """Whether `value` holds no subclass instances: marshal checks exact types, in C."""
    try:
        marshal.dumps(value)
    except ValueError:
        return False
    return True


def check_json(value: Any) -> None:
    """Raise `JsonRuleError` unless `value` is JSON by the rule above (scalars checked directly)."""
    kind = type(value)
    if kind in _SCALARS or (kind is int and -(2**63) <= value < 2**64):
        return
    if kind is float and value - value == 0.0:  # finite: inf - inf and nan - nan are nan
        return
    encode_json(value)


class JsonRuleError(Exception):
    """Why a value is not JSON; callers re-raise it as their layer's typed error."""


def _explain(value: Any) -> str | None:
    """Where and why `value` breaks the rule (the first place a depth-first walk meets), or
    None. Containers on the current path are tracked, so a shared subtree is not a cycle."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]
    on_path: set[int] = set()
    while pending:
        node, where, depth = pending.pop()
        if depth < 0:  # the marker left when a container was entered: leave it
            on_path.discard(id(node))
            continue
        problem = _scalar_problem(node) if type(node) not in (dict, list) else None
        at = f" at {where[:80]!r}" if where else ""
        if problem is not None:
            return problem + at
        if type(node) not in (dict, list):
            continue
        if id(node) in on_path:
            return f"value is cyclic{at} (a container holds itself)"
        if depth >= MAX_DEPTH:
            return f"value nests deeper than {MAX_DEPTH} containers{at}"
        on_path.add(id(node))
        pending.append((node, where, -1))
        if type(node) is dict:
            for key, item in node.items():
                if type(key) is not str:
                    return f"object key {key!r:.80}{at} is not a str"
                pending.append((item, f"{where}/{key}", depth + 1))
        else:
            pending.extend((item, f"{where}/{i}", depth + 1) for i, item in enumerate(node))
    return None


def _scalar_problem(node: Any) -> str | None:
    kind = type(node)
    if kind in _SCALARS:
        return None
    if kind is int:
        return None if -(2**63) <= node < 2**64 else "an integer that does not fit in 64 bits"
    if kind is float:
        if node - node == 0.0:
            return None
        return f"{node!r} (NaN and infinities are not JSON numbers)"
    return f"a {kind.__name__} (JSON values are dicts, lists, str, finite numbers, bool, None)"
