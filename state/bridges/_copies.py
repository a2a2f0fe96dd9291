"""Deep copies of the events a session service keeps, by a plan made once per kept event.

A kept event is never changed, so the places where its copies must differ from it (its
containers and models) are found once; each copy then copies only those, where a general
deep copy walks every field of every model on every copy (most of an ADK event's fields are
None). Values the plan does not know (sets, tuples, models with extra fields or a copier of
their own) are copied by `copy.deepcopy`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from google.adk.events.event import Event
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

Copier = Callable[[Any], Any]
"""Returns a deep copy of the value its plan was made from (or of one of the same shape)."""

_SCALARS: Final = frozenset({type(None), bool, int, float, str, bytes})
_MODEL_COPIERS: Final = (BaseModel.__deepcopy__, Event.__deepcopy__)
_set = object.__setattr__


def copier(value: Any) -> Copier:
    """A copier of `value` as it is now: `value` (and what is copied by it) must not change
    afterwards, since the plan follows its present shape."""
    kind = type(value)
    if kind in _SCALARS:
        return _same
    if kind is dict:
        inner = {key: copier(item) for key, item in value.items() if type(item) not in _SCALARS}
        return _dict_copier(inner) if inner else dict.copy
    if kind is list:
        if all(type(item) in _SCALARS for item in value):
            return list.copy
        return _list_copier([copier(item) for item in value])
    if (
        isinstance(value, BaseModel) and value.__pydantic_extra__ is None
        and getattr(kind, "__deepcopy__", None) in _MODEL_COPIERS
    ):  # fmt: skip
        fields = value.__dict__
        inner = {name: copier(item) for name, item in fields.items() if type(item) not in _SCALARS}
        return _model_copier(kind, inner)
    return copy.deepcopy


def _same(value: Any) -> Any:
    return value


def _dict_copier(inner: dict[str, Copier]) -> Copier:
    def copied(value: dict[str, Any]) -> dict[str, Any]:
        result = value.copy()
        for key, copy_of in inner.items():
            result[key] = copy_of(value[key])
        return result

    return copied


def _list_copier(items: list[Copier]) -> Copier:
    def copied(value: list[Any]) -> list[Any]:
        return [copy_of(item) for copy_of, item in zip(items, value, strict=True)]

    return copied


def _model_copier(kind: type[BaseModel], inner: dict[str, Copier]) -> Copier:
    def copied(model: BaseModel) -> BaseModel:
        fields = model.__dict__.copy()
        for name, copy_of in inner.items():
            fields[name] = copy_of(fields[name])
        clone = kind.__new__(kind)
        _set(clone, "__dict__", fields)
        _set(clone, "__pydantic_extra__", None)
        _set(clone, "__pydantic_fields_set__", model.__pydantic_fields_set__.copy())
        private = model.__pydantic_private__
        if private is not None:
            private = {
                name: copy.deepcopy(item)
                for name, item in private.items()
                if item is not PydanticUndefined
            }
        _set(clone, "__pydantic_private__", private)
        return clone

    return copied
