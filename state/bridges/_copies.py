"""Deep copies of the events a session service keeps, without a general deep copy's cost.

`deep_copy` copies only what a copy must not share: dicts, lists and pydantic models (field
by field, skipping the None and scalar fields most of an ADK event's are); how a type is
copied is worked out once per type. Nothing is kept per copied value, so a service that
keeps thousands of events keeps no copying state beside them (state kept per event, such
as a copy plan of closures, is thousands of objects the garbage collector walks again and
again). Values it does not know (sets, tuples, models with extra fields or a copier of
their own) go to `copy.deepcopy`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

from google.adk.events.event import Event
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

Copier = Callable[[Any], Any]

TYPES_REMEMBERED: Final = 256
"""How many types' copiers are kept (a program that makes model classes at run time makes
new types without end)."""

_SCALARS: Final = frozenset({type(None), bool, int, float, str, bytes})
_MODEL_COPIERS: Final = (BaseModel.__deepcopy__, Event.__deepcopy__)
_set = object.__setattr__


def deep_copy(value: Any) -> Any:
    """A deep copy of `value` that shares no container or model with it."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    copy_of = _BY_TYPE.get(kind)
    if copy_of is None:
        copy_of = _copier_of(kind)
        if len(_BY_TYPE) >= TYPES_REMEMBERED:  # emptied when full: see TYPES_REMEMBERED
            _BY_TYPE.clear()
            _BY_TYPE.update(_BUILTINS)
        _BY_TYPE[kind] = copy_of
    return copy_of(value)


def _copy_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    result = value.copy()
    for key, item in value.items():
        if type(item) not in _SCALARS:
            result[key] = deep_copy(item)
    return result


def _copy_list(value: list[Any]) -> list[Any]:
    return [item if type(item) in _SCALARS else deep_copy(item) for item in value]


_BUILTINS: Final[dict[type, Copier]] = {dict: _copy_dict, list: _copy_list}
_BY_TYPE: dict[type, Copier] = dict(_BUILTINS)
"""How each type met so far is copied (one entry per type, never per value)."""


def _copier_of(kind: type) -> Copier:
    if issubclass(kind, BaseModel) and getattr(kind, "__deepcopy__", None) in _MODEL_COPIERS:
        return _model_copier(kind)
    return copy.deepcopy


def _model_copier(kind: type[BaseModel]) -> Copier:
    """The copier of a model class with pydantic's own deep copy: its fields copied as
    `deep_copy` copies them, its set fields and private state kept (an instance with extra
    fields goes to `copy.deepcopy`)."""

    def copied(model: BaseModel) -> BaseModel:
        if model.__pydantic_extra__ is not None:
            return copy.deepcopy(model)
        source = model.__dict__
        fields = source.copy()
        for name, item in source.items():
            if type(item) not in _SCALARS:
                fields[name] = deep_copy(item)
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
