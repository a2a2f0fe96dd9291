"""The scope plan: which bucket classes a turn has, and each one's storage key for given ids.

`Scopes` is built once per application (custom scopes checked once); its `plan(ids)` is
cached for recently seen ids, since `key_for` depends on the ids alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import NamedTuple

from ._bucket import AgentState
from ._errors import MissingIdError, ScopeError, StatePathError
from ._ids import TurnIds
from ._keys import namespaced
from ._paths import split_path
from ._scopes import BUILTIN_SCOPES
from .backends._items import BuiltKeys
from .backends._keys import check_key

_BUILTIN = {cls.scope: cls for cls in BUILTIN_SCOPES}
_EVIDENCE_ORDER = {"session": 0, "user": 1, "conversation": 2, "app": 3}
"""The user's own documents first (a forget deletes them), the least shared first (the fewer
activities a document takes, the longer its newest `EVIDENCE_LIMIT` reach back), then shared
ones (see `Plan.evidence`)."""
PLAN_CACHE_SIZE = 4096
"""Distinct ids whose keys an application keeps (about 1 KB each)."""
PATH_CACHE_SIZE = 1024
"""Distinct state paths whose parse an application keeps."""
TURN_STATE_NAMES = frozenset({
    "app", "attach", "changed", "close", "closed", "conversation", "delete", "delivered", "discard",
    "discarded", "evidence_document", "fetch", "forbid_rerun", "get", "has", "history", "ids",
    "keys", "load", "note_evidence", "rerun", "scope", "scope_names", "session", "set",
    "setdefault", "stored_documents", "temp", "to_dict", "update", "user",
})  # fmt: skip
"""`TurnState`'s public attribute names, off limits for custom scopes (`state.<scope>`);
listed here so the plan needs nothing of the turn (tests/state/test_turn_state.py pins them)."""


class Plan(NamedTuple):
    """The buckets of a turn with given ids; shared by every such turn, so never mutated."""

    scopes: dict[str, tuple[type[AgentState], str | None]]
    """Each scope's bucket class and storage key (None for a scope that is never stored)."""
    keys: BuiltKeys
    """The keys to read, in scope order (each checked once, when the plan is built)."""
    missing: dict[str, MissingIdError]
    """The scopes whose key needs an id these ids lack."""
    evidence: tuple[str, ...]
    """The stored scopes in the order a turn's delivery evidence looks for a document to go
    in (see `state/_delivery.py`): session, user, conversation, app, then custom scopes."""


class Declaration(NamedTuple):
    """The stored scopes a route declares it uses (`scopes=` of `AgentApplication.message` and
    `.activity`): its turns read only those, and using another raises `UndeclaredScopeError`."""

    scopes: frozenset[str]
    route: str
    """How the error names the declaring route (its handler)."""


class Located(NamedTuple):
    """Where a state key or path points: a scope, the steps inside it, and whether it was
    written as a dotted path (which `[]`, `in` and `del` refuse)."""

    scope: str
    steps: tuple[str, ...]
    path: bool


class Scopes:
    """The scope classes of a turn, built-in plus custom ones, checked once, and their keys.

    `AgentApplication` builds one and hands it to every `TurnState`, so turns skip the checks
    and the keys of recently seen ids come from a bounded cache (`key_for` depends on ids only).
    """

    __slots__ = ("classes", "names", "plan", "locate")

    def __init__(
        self, custom_scopes: Iterable[type[AgentState]] = (), *, include_builtin: bool = True
    ) -> None:
        """`include_builtin=False`: only the given classes (a background job's one scope)."""
        self.classes: tuple[tuple[str, type[AgentState]], ...] = tuple(
            _scope_classes(custom_scopes, include_builtin).items()
        )
        self.names = frozenset(name for name, _ in self.classes)
        """Every scope name, whether or not a turn has the ids its key needs."""
        self.plan: Callable[[TurnIds], Plan] = lru_cache(maxsize=PLAN_CACHE_SIZE)(self._plan)
        self.locate: Callable[[str], Located] = lru_cache(maxsize=PATH_CACHE_SIZE)(self._locate)

    def _locate(self, key: str) -> Located:
        """Where a state key or path points. A colon before any dot is the prefix form: one
        member of that scope, named as is (`"user:last.login"`). A first dotted step naming a
        scope is the path form (`"user.profile.name"`: steps `profile`, `name`). Anything
        else is one session member, named as is (`"topic"`, `"version.2"`). Cached per key
        (`locate`), since this depends on the key and the scope names alone."""
        if not key:
            raise StatePathError("a state key or path must be a non-empty str")
        head, colon, name = key.partition(":")
        if colon and "." not in head:
            return Located(head, (name,), False)
        first, dot, rest = key.partition(".")
        if dot and first in self.names:
            return Located(first, split_path(rest), True)
        return Located("session", (key,), False)

    def _plan(self, ids: TurnIds) -> Plan:
        """The buckets of a turn with `ids`; `ScopeError` when two scopes share a key."""
        scopes: dict[str, tuple[type[AgentState], str | None]] = {}
        missing: dict[str, MissingIdError] = {}
        owners: dict[str, str] = {}
        for name, cls in self.classes:
            if not cls.persisted:
                scopes[name] = (cls, None)
                continue
            try:
                key = check_key(scope_key(cls, ids))  # once: turns and saves trust the plan
            except MissingIdError as exc:
                missing[name] = exc
                continue
            if key in owners:
                raise ScopeError(f"scopes {owners[key]!r} and {name!r} have the same key {key!r}")
            owners[key] = name
            scopes[name] = (cls, key)
        stored = [name for name, (_, key) in scopes.items() if key is not None]
        evidence = sorted(stored, key=lambda name: _EVIDENCE_ORDER.get(name, len(_EVIDENCE_ORDER)))
        return Plan(scopes, BuiltKeys(owners), missing, tuple(evidence))


def scope_key(cls: type[AgentState], ids: TurnIds) -> str:
    """`cls.key_for(ids)`; `ScopeError` when `ids` has a namespace and the key lies outside it."""
    key = cls.key_for(ids)
    namespace = ids.namespace
    if namespace is not None and not key.startswith(namespaced(namespace, "")):
        raise ScopeError(
            f"{cls.__name__}.key_for() gave {key!r}, outside the namespace {namespace!r}: "
            f"a key must start with escape_segment(ids.namespace) + '/'"
        )
    return key


def _scope_classes(
    custom_scopes: Iterable[type[AgentState]], include_builtin: bool
) -> dict[str, type[AgentState]]:
    """The built-in scopes with the custom ones added (or replacing a built-in they subclass)."""
    classes = dict(_BUILTIN) if include_builtin else {}
    custom: dict[str, type[AgentState]] = {}
    for cls in custom_scopes:
        if not (isinstance(cls, type) and issubclass(cls, AgentState)):
            raise ScopeError(f"custom scopes are AgentState subclasses, got {cls!r}")
        name = getattr(cls, "scope", None)
        if name is None:
            raise ScopeError(f"{cls.__name__} needs a `scope` name")
        if custom.get(name, cls) is not cls:
            raise ScopeError(f"{custom[name].__name__} and {cls.__name__} both claim {name!r}")
        builtin = _BUILTIN.get(name)
        if builtin is not None and not issubclass(cls, builtin):
            raise ScopeError(
                f"{cls.__name__} claims the built-in scope {name!r}; "
                f"subclass {builtin.__name__} to replace it"
            )
        if builtin is None and name in TURN_STATE_NAMES:
            raise ScopeError(f"scope name {name!r} clashes with TurnState.{name}")
        if cls.persisted and cls.key_for.__func__ is AgentState.key_for.__func__:  # type: ignore[attr-defined]
            raise ScopeError(f"{cls.__name__} is persisted, so it must override key_for()")
        custom[name] = classes[name] = cls
    return classes
