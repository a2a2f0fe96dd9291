"""The exposed state of a thread: the session members a pydantic model declares, as JSON.

The model's fields are members of the session bucket; those named `server_only` are kept
there and validated like the rest, but never sent to a client and never accepted from one.
Every other member of the session (and every other scope) stays on the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from .. import AgentState, StateValidationError
from ._server_errors import RunInputError

M = TypeVar("M", bound=BaseModel)


class ExposedState(Generic[M]):
    """What a thread shares with its client: `model`'s fields minus `server_only` ones."""

    __slots__ = ("model", "fields", "exposed")

    def __init__(self, model: type[M], server_only: Iterable[str] = ()) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"the exposed state is a pydantic model class, got {model!r}")
        self.model = model
        self.fields = frozenset(model.model_fields)
        hidden = frozenset(server_only)
        unknown = hidden - self.fields
        if unknown:
            raise ValueError(f"server_only names no field of {model.__name__}: {sorted(unknown)}")
        self.exposed = self.fields - hidden

    def load(self, session: AgentState) -> M:
        """The model from the session's members (defaults for those not stored yet)."""
        stored = {name: session[name] for name in self.fields if name in session}
        try:
            return self.model.model_validate(stored)
        except ValidationError as exc:
            raise StateValidationError(session.key, *_first_error(exc)) from None

    def store(self, instance: M, session: AgentState) -> None:
        """Write the model's fields into the session bucket (unchanged members stay as read),
        validated first: `StateValidationError` if the agent left a value the model refuses."""
        dumped = instance.model_dump(mode="json", warnings=False)
        try:
            self.model.model_validate(dumped)
        except ValidationError as exc:
            raise StateValidationError(session.key, *_first_error(exc)) from None
        for name, value in dumped.items():
            if session.get(name, _ABSENT) != value:
                session[name] = value

    def view(self, instance: M) -> dict[str, Any]:
        """The JSON the client sees: the exposed fields only."""
        return instance.model_dump(mode="json", include=set(self.exposed))

    def check_client(self, state: Any) -> dict[str, Any]:
        """The client's `state` if it names only exposed members; `RunInputError` otherwise.
        `None` (no view) reads as `{}`: no edits."""
        if state is None:
            return {}
        if not isinstance(state, Mapping):
            raise RunInputError(f"state must be a JSON object, got {type(state).__name__}")
        scoped = sorted(name for name in state if ":" in name)
        if scoped:
            raise RunInputError(f"a client may write only its thread's state, not {scoped}")
        refused = sorted(set(state) - self.exposed)
        if refused:
            raise RunInputError(
                f"state members {refused} are not exposed fields of {self.model.__name__}"
            )
        return dict(state)

    def validate(self, view: Mapping[str, Any], hidden_from: M) -> M:
        """The model for a merged `view`, server-only fields taken from `hidden_from`."""
        hidden = hidden_from.model_dump(mode="json", exclude=set(self.exposed))
        try:
            return self.model.model_validate({**hidden, **view})
        except ValidationError as exc:
            raise RunInputError(f"state is not a valid {self.model.__name__}: "
                                f"{validation_summary(exc)}") from None  # fmt: skip


_ABSENT = object()


def _first_error(exc: ValidationError) -> tuple[str, str]:
    error = exc.errors()[0]
    return _location(error["loc"]), error["msg"]


def validation_summary(exc: ValidationError) -> str:
    """`where: what` for the first few errors of a pydantic validation, for an HTTP detail."""
    return "; ".join(f"{_location(error['loc'])}: {error['msg']}" for error in exc.errors()[:5])


def _location(steps: tuple[int | str, ...]) -> str:
    return "/".join(str(step) for step in steps) or "(root)"
