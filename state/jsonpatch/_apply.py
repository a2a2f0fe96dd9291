"""RFC 6902 JSON Patch: strict validation and all-or-nothing apply without copying the document.

Copy mode copies only the containers on the changed paths and shares everything else with the
input; in-place mode journals each change and undoes the journal when an operation fails, and
returns the caller's root object unless an operation replaced the root (path "").
PatchFormatError means the patch is malformed, PatchConflictError that this document refuses it.
RFC 6902 makes an unknown `op` malformed; `drop_unknown=True` is the AG-UI snapshots/deltas
rule instead: an operation whose `op` is a string naming no operation is left out (the caller
warns), the rest is validated and applied as usual; a missing or non-string `op` stays malformed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._errors import PatchConflictError, PatchFormatError
from ._pointer import parse_pointer
from ._values import clone, json_equal

__all__ = ["apply_patch", "validate_patch"]

Path = tuple[str, ...]
_MISSING = object()


class _Conflict(Exception):
    """Internal: an operation cannot apply; the apply loop adds the operation index and context."""


def validate_patch(patch: Any, *, drop_unknown: bool = False) -> list[int]:
    """Check the patch's structure only, raising PatchFormatError before any document is
    touched; the indices of the operations `drop_unknown` leaves out (see the module doc)."""
    steps = _compile(patch, drop_unknown)
    kept = {index for index, *_ in steps}
    return [index for index in range(len(patch)) if index not in kept]


def apply_patch(
    doc: Any, patch: list[dict[str, Any]], *, in_place: bool = False, drop_unknown: bool = False
) -> Any:
    """Apply all operations or none (PatchConflictError names the failing one); doc survives.
    With `drop_unknown`, operations of an unknown `op` are left out (see the module doc)."""
    steps = _compile(patch, drop_unknown)
    target: _Target = _InPlace(doc) if in_place else _PathCopy(doc)
    for index, run, path, source, value in steps:
        try:
            run(target, path, source, value)
        except _Conflict as exc:
            target.rollback()
            raise PatchConflictError(index, f"{_describe(patch[index])}: {exc}") from None
        except BaseException:
            target.rollback()
            raise
    return target.root


class _Target:
    """A document being patched; subclasses decide how containers become writable and undone."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def rollback(self) -> None:
        """Undo this apply's changes to the caller's containers (nothing to do by default)."""

    def get(self, path: Path) -> Any:
        """Return the value at path, raising _Conflict when it does not exist."""
        node = self.root
        for token in path:
            node = _child(node, token)
        return node

    def add(self, path: Path, value: Any) -> None:
        """RFC 6902 add: set a member, insert into an array, or replace the root."""
        if not path:
            self.root = value
            return
        parent = self._writable_parent(path)
        key = path[-1]
        if isinstance(parent, dict):
            self._set_key(parent, key, value)
        elif isinstance(parent, list):
            size = len(parent)
            self._insert(parent, size if key == "-" else _index(key, size + 1), value)
        else:
            raise _Conflict(f"cannot add a member to {_kind(parent)}")

    def remove(self, path: Path) -> Any:
        """RFC 6902 remove: delete an existing member or array element and return it."""
        if not path:
            raise _Conflict("cannot remove the whole document")
        parent = self._writable_parent(path)
        key = path[-1]
        if isinstance(parent, dict):
            if key not in parent:
                raise _Conflict(f"member {key!r} does not exist")
            return self._del_key(parent, key)
        if isinstance(parent, list):
            return self._del_item(parent, _index(key, len(parent)))
        raise _Conflict(f"cannot remove a member of {_kind(parent)}")

    def replace(self, path: Path, value: Any) -> None:
        """RFC 6902 replace: overwrite an existing member, array element or the root."""
        if not path:
            self.root = value
            return
        parent = self._writable_parent(path)
        key = path[-1]
        if isinstance(parent, dict):
            if key not in parent:
                raise _Conflict(f"member {key!r} does not exist")
            self._set_key(parent, key, value)
        elif isinstance(parent, list):
            self._set_item(parent, _index(key, len(parent)), value)
        else:
            raise _Conflict(f"cannot replace a member of {_kind(parent)}")

    def move(self, source: Path, path: Path) -> None:
        """RFC 6902 move: remove at source then add at path; a value cannot move into itself."""
        if path[: len(source)] == source:
            if len(path) != len(source):
                raise _Conflict("cannot move a value into one of its own children")
            self.get(source)
            return
        self.add(path, self.remove(source))

    def _writable_parent(self, path: Path) -> Any:
        """Return the container holding path's last token, ready to be changed."""
        raise NotImplementedError

    def _set_key(self, obj: dict[str, Any], key: str, value: Any) -> None:
        obj[key] = value

    def _del_key(self, obj: dict[str, Any], key: str) -> Any:
        return obj.pop(key)

    def _insert(self, obj: list[Any], index: int, value: Any) -> None:
        obj.insert(index, value)

    def _set_item(self, obj: list[Any], index: int, value: Any) -> None:
        obj[index] = value

    def _del_item(self, obj: list[Any], index: int) -> Any:
        return obj.pop(index)


class _PathCopy(_Target):
    """Copy mode: shallow-copy each container on a written path once, share all the rest."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self._owned: dict[int, Any] = {}  # id -> copy; holding the copy keeps its id unique

    def _own(self, node: Any) -> Any:
        """Return a private shallow copy of a container (made once per apply)."""
        if id(node) in self._owned or not isinstance(node, (dict, list)):
            return node
        node = node.copy()
        self._owned[id(node)] = node
        return node

    def _writable_parent(self, path: Path) -> Any:
        node = self.root = self._own(self.root)
        for token in path[:-1]:
            if isinstance(node, dict):
                child = node.get(token, _MISSING)
                if child is _MISSING:
                    raise _Conflict(f"member {token!r} does not exist")
                if id(child) not in self._owned and isinstance(child, (dict, list)):
                    child = node[token] = self._own(child)
            elif isinstance(node, list):
                position = _index(token, len(node))
                child = node[position]
                if id(child) not in self._owned and isinstance(child, (dict, list)):
                    child = node[position] = self._own(child)
            else:
                raise _Conflict(f"cannot descend into {_kind(node)}")
            node = child
        return node


class _InPlace(_Target):
    """In-place mode: change the caller's containers and journal how to undo each change."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self._journal: list[tuple[Callable[[Any, Any, Any], None], Any, Any, Any]] = []

    def rollback(self) -> None:
        for undo, obj, key, saved in reversed(self._journal):
            undo(obj, key, saved)
        self._journal.clear()

    def _writable_parent(self, path: Path) -> Any:
        return self.get(path[:-1])

    def _set_key(self, obj: dict[str, Any], key: str, value: Any) -> None:
        self._journal.append((_restore_key, obj, key, obj.get(key, _MISSING)))
        obj[key] = value

    def _del_key(self, obj: dict[str, Any], key: str) -> Any:
        after = _keys_after(obj, key)
        value = obj.pop(key)
        self._journal.append((_reinsert_key, obj, key, (value, after)))
        return value

    def _insert(self, obj: list[Any], index: int, value: Any) -> None:
        obj.insert(index, value)
        self._journal.append((_undo_insert, obj, index, None))

    def _set_item(self, obj: list[Any], index: int, value: Any) -> None:
        self._journal.append((_restore_item, obj, index, obj[index]))
        obj[index] = value

    def _del_item(self, obj: list[Any], index: int) -> Any:
        value = obj.pop(index)
        self._journal.append((_undo_del_item, obj, index, value))
        return value


def _keys_after(obj: dict[str, Any], key: str) -> list[str]:
    """Keys that follow key, so that undoing its removal can restore the member order."""
    if next(reversed(obj)) == key:
        return []
    keys = list(obj)
    return keys[keys.index(key) + 1 :]


def _restore_key(obj: dict[str, Any], key: str, old: Any) -> None:
    if old is _MISSING:
        del obj[key]
    else:
        obj[key] = old


def _reinsert_key(obj: dict[str, Any], key: str, saved: tuple[Any, list[str]]) -> None:
    value, after = saved
    obj[key] = value
    for later in after:
        obj[later] = obj.pop(later)


def _undo_insert(obj: list[Any], index: int, _saved: None) -> None:
    del obj[index]


def _restore_item(obj: list[Any], index: int, old: Any) -> None:
    obj[index] = old


def _undo_del_item(obj: list[Any], index: int, old: Any) -> None:
    obj.insert(index, old)


def _child(node: Any, token: str) -> Any:
    """Step from a container to one member, strictly (no '-', no leading zeros)."""
    if isinstance(node, dict):
        child = node.get(token, _MISSING)
        if child is _MISSING:
            raise _Conflict(f"member {token!r} does not exist")
        return child
    if isinstance(node, list):
        return node[_index(token, len(node))]
    raise _Conflict(f"cannot descend into {_kind(node)}")


def _index(token: str, limit: int) -> int:
    """Parse an RFC 6901 array index (no sign, no leading zero) that must be below limit."""
    if token.isdigit() and token.isascii() and (token[0] != "0" or len(token) == 1):
        if len(token) > 18:  # past any list's length, and int() refuses 5,000 digits
            raise _Conflict(f"index {token[:20]}... is out of range")
        index = int(token)
        if index < limit:
            return index
        raise _Conflict(f"index {index} is out of range")
    raise _Conflict(f"{token!r} is not a valid array index")


def _kind(node: Any) -> str:
    return "null" if node is None else f"a {type(node).__name__}"


def _describe(op: dict[str, Any]) -> str:
    """Name an operation in error messages, e.g. "move '/a' -> '/b'"."""
    if "from" in op and op["op"] in ("move", "copy"):
        return f"{op['op']} {op['from']!r} -> {op['path']!r}"
    return f"{op['op']} {op['path']!r}"


def _run_add(target: _Target, path: Path, _source: Path, value: Any) -> None:
    target.add(path, clone(value))


def _run_remove(target: _Target, path: Path, _source: Path, _value: Any) -> None:
    target.remove(path)


def _run_replace(target: _Target, path: Path, _source: Path, value: Any) -> None:
    target.replace(path, clone(value))


def _run_move(target: _Target, path: Path, source: Path, _value: Any) -> None:
    target.move(source, path)


def _run_copy(target: _Target, path: Path, source: Path, _value: Any) -> None:
    target.add(path, clone(target.get(source)))


def _run_test(target: _Target, path: Path, _source: Path, value: Any) -> None:
    if not json_equal(target.get(path), value):
        raise _Conflict("test failed: the value differs")


_Step = tuple[int, Callable[[_Target, Path, Path, Any], None], Path, Path, Any]
_RUNNERS = {
    "add": _run_add,
    "remove": _run_remove,
    "replace": _run_replace,
    "move": _run_move,
    "copy": _run_copy,
    "test": _run_test,
}
_NEEDS_VALUE = frozenset({"add", "replace", "test"})
_NEEDS_FROM = frozenset({"move", "copy"})


def _compile(patch: Any, drop_unknown: bool = False) -> list[_Step]:
    """Validate the patch and turn each operation into (index, runner, path, from, value)."""
    if not isinstance(patch, list):
        raise PatchFormatError(f"a patch must be a JSON array, got {type(patch).__name__}")
    steps: list[_Step] = []
    for index, op in enumerate(patch):
        if not isinstance(op, dict):
            raise PatchFormatError(f"operation {index} must be a JSON object")
        name = op.get("op", _MISSING)
        if name is _MISSING:
            raise PatchFormatError(f"operation {index} has no 'op' member")
        run = _RUNNERS.get(name) if isinstance(name, str) else None
        if run is None and drop_unknown and isinstance(name, str):
            continue
        if run is None:
            raise PatchFormatError(f"operation {index} has an unknown op {name!r}")
        path = _pointer(op, "path", index)
        source = _pointer(op, "from", index) if name in _NEEDS_FROM else ()
        if name in _NEEDS_VALUE and "value" not in op:
            raise PatchFormatError(f"operation {index} ({name}) has no 'value' member")
        steps.append((index, run, path, source, op.get("value")))
    return steps


def _pointer(op: dict[str, Any], member: str, index: int) -> Path:
    """Parse one pointer member of an operation, naming the operation when it is malformed."""
    if member not in op:
        raise PatchFormatError(f"operation {index} ({op['op']}) has no {member!r} member")
    try:
        return parse_pointer(op[member])
    except PatchFormatError as exc:
        raise PatchFormatError(f"operation {index} {member}: {exc}") from None
