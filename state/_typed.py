"""Typed buckets: a pydantic model over the stored document, its schema version and migrations.

A bucket with `schema_version` stores it in the reserved member `"_schema"` of its document
(pydantic fields cannot start with `_`, so it never clashes with one). A stored document
without it is version 1. On load, the migrations registered from its version up to the
bucket's `schema_version` run in order, each on the document without `"_schema"`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from ._errors import StateValidationError, StateValueError

SCHEMA_FIELD = "_schema"
Migration = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Schema:
    """What a typed bucket class declares: its name, model, schema version and migrations
    (the class's own registry, which `AgentState.migration` fills)."""

    name: str
    model: type[BaseModel]
    version: int | None
    migrations: dict[int, Migration]


def decode(
    cls: Schema, key: str | None, raw: dict[str, Any] | None
) -> tuple[BaseModel, dict[str, Any]]:
    """Build the bucket's model from a stored document (None: a new one), migrating it first;
    also give the stored members the model does not declare, which are kept as they are."""
    document = {} if raw is None else upgrade(cls, key, raw)
    try:
        model = cls.model.model_validate(document)
    except ValidationError as exc:
        raise validation_error(key, exc) from exc
    return model, undeclared(cls.model, document)


def undeclared(model: type[BaseModel], document: dict[str, Any]) -> dict[str, Any]:
    """The members of `document` that `model` would drop: it neither declares them nor keeps
    them itself (`extra="allow"` keeps them in the model, `extra="forbid"` refuses them)."""
    if model.model_config.get("extra") in ("allow", "forbid"):
        return {}
    known = _declared_names(model)
    return {name: value for name, value in document.items() if name not in known}


def encode(cls: Schema, value: BaseModel, kept: dict[str, Any]) -> dict[str, Any]:
    """The JSON document to store for a model: `"_schema"` first when versioned, then the
    undeclared members `kept` from the stored document, then the model's fields."""
    try:
        document = value.model_dump(mode="json", by_alias=True, warnings=False)
    except PydanticSerializationError as exc:
        raise StateValueError(f"{cls.name} holds a value that is not JSON: {exc}") from exc
    if kept:
        document = {**kept, **document}
    if cls.version is None:
        return document
    return {SCHEMA_FIELD: cls.version, **document}


@lru_cache(maxsize=256)
def _declared_names(model: type[BaseModel]) -> frozenset[str]:
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for alias in (field.alias, field.validation_alias, field.serialization_alias):
            if isinstance(alias, str):
                names.add(alias)
            elif isinstance(alias, AliasChoices):
                names.update(choice for choice in alias.choices if isinstance(choice, str))
    return frozenset(names)


def check(cls: Schema, key: str | None, document: dict[str, Any]) -> None:
    """Validate a document about to be stored, so a bucket never writes what it cannot load."""
    data = {name: value for name, value in document.items() if name != SCHEMA_FIELD}
    try:
        cls.model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(key, exc) from exc


def outdated(cls: Schema, raw: dict[str, Any]) -> bool:
    """Whether a stored document is at an older schema version than the model's (so loading
    it migrated it)."""
    return cls.version is not None and raw.get(SCHEMA_FIELD, 1) != cls.version


def upgrade(cls: Schema, key: str | None, raw: dict[str, Any]) -> dict[str, Any]:
    """Run the registered migrations from the document's schema version to the bucket's."""
    target = cls.version
    if target is None:
        return raw
    document = dict(raw)
    version = document.pop(SCHEMA_FIELD, 1)
    if type(version) is not int or version < 1:
        raise StateValidationError(key, SCHEMA_FIELD, f"{version!r} is not a schema version")
    if version > target:
        raise StateValidationError(
            key, SCHEMA_FIELD, f"version {version} is newer than {cls.name}'s {target}"
        )
    for step in range(version, target):
        migrate = cls.migrations.get(step)
        if migrate is None:
            raise StateValidationError(
                key, SCHEMA_FIELD, f"{cls.name} has no migration from version {step}"
            )
        try:
            document = migrate(document)
        except Exception as exc:  # the user's function: name the key and versions, chain it
            raise StateValidationError(
                key,
                SCHEMA_FIELD,
                f"{cls.name}'s migration from version {step} to {step + 1} raised {exc!r}",
            ) from exc
        if not isinstance(document, dict):
            raise StateValidationError(
                key, SCHEMA_FIELD, f"the migration from version {step} did not return a dict"
            )
    return document


def validation_error(
    key: str | None, exc: ValidationError, prefix: tuple[str, ...] = ()
) -> StateValidationError:
    """Turn pydantic's error into one naming the storage key and the first failing field."""
    first, *rest = exc.errors()
    field = ".".join(map(str, (*prefix, *first["loc"]))) or "<root>"
    reason = first["msg"] + (f" (and {len(rest)} more error(s))" if rest else "")
    return StateValidationError(key, field, reason)
