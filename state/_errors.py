"""The errors of the state layer, so handlers and jobs can tell a bad id from a bad value."""

from __future__ import annotations

from collections.abc import Iterable

from .backends._errors import ConflictError, InvalidValueError


class StateError(Exception):
    """Base class of every error raised by the state layer."""


class MissingIdError(StateError, ValueError):
    """A scope's key needs an id (channel, user, conversation, app name) the turn does not have."""

    def __init__(self, scope: str, missing: Iterable[str]) -> None:
        self.scope = scope
        self.missing = tuple(missing)
        super().__init__(
            f"{scope} state needs {' and '.join(self.missing)}, which this turn does not have"
        )


class ScopeError(StateError, ValueError):
    """A scope name is unknown, malformed, or clashes with another scope or a TurnState name."""


class UndeclaredScopeError(ScopeError):
    """A turn of a route that declares the scopes it uses (`scopes=`) used another stored
    scope, which its turn did not read; `scope`, `declared` and `route` name them."""

    def __init__(self, scope: str, declared: Iterable[str], route: str) -> None:
        self.scope = scope
        self.declared = tuple(sorted(declared))
        self.route = route
        super().__init__(
            f"scope {scope!r} is not among the scopes route {route} declares "
            f"(scopes={self.declared!r}); add it there to use it"
        )


class StateClosedError(StateError, RuntimeError):
    """State was used after its turn ended (saved or discarded): the change would be lost."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__(
            f"{scope} state belongs to a turn that has ended (saved or discarded); "
            "a change now would never be saved: make it inside the turn"
        )


class StateValueError(StateError, InvalidValueError):
    """A value put into state is not JSON (dicts with str keys, lists, str, finite numbers,
    bool, None; see `agent_state.backends` `MAX_DEPTH`): the storage's one JSON rule, so
    `InvalidValueError` catches it wherever the value was refused."""


class StatePathError(StateError, TypeError):
    """A dotted path is malformed or runs through a value that is not a container."""


class StateValidationError(StateError, ValueError):
    """A typed bucket's document fails its model or schema version; names the key and field."""

    def __init__(self, key: str | None, field: str, reason: str) -> None:
        self.key = key
        self.field = field
        self.reason = reason
        super().__init__(f"state for key {key!r} is invalid at field {field!r}: {reason}")


class StateConflictError(ConflictError, StateError):
    """A bucket's conditional write failed: someone else changed it since it was read.

    `scopes` names the scopes whose write failed; `paths` the JSON pointers that both
    writers changed, when the conflict was found while rebasing onto the newer version;
    `reason` the message without the keys and paths; `retryable` is False when trying again
    cannot help (a clash on a path, a document deleted meanwhile).
    """

    def __init__(
        self,
        keys: Iterable[str],
        *,
        scopes: Iterable[str],
        paths: Iterable[str] = (),
        message: str | None = None,
        retryable: bool = True,
    ) -> None:
        self.scopes = sorted(scopes)
        self.paths = list(paths)
        self.retryable = retryable
        self.reason = message or f"state of scope(s) {', '.join(map(repr, self.scopes))} changed"
        detail = self.reason
        if self.paths:
            detail += f" at {', '.join(map(repr, self.paths))}"
        super().__init__(keys, detail)
