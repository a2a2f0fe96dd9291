"""Typed buckets: a pydantic model over the stored document, its schema version and migrations.

A bucket with `schema_version` stores it in the reserved member `"_schema"` of its document
(pydantic fields cannot start with `_`, so it never clashes with one). A stored document
without it is version 1. On load, the migrations registered from its version up to the
bucket's `schema_version` run in order, each on the document without `"_schema"`. The
migrated document is stored with the next write of the turn that read it (see
`AgentState.upgrade_write`); a turn that writes nothing leaves it at its old version.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from ._errors import StateValidationError, StateValueError

if TYPE_CHECKING:
    from ._bucket import AgentState

SCHEMA_FIELD = "_schema"
Migration = Callable[[dict[str, Any]], dict[str, Any]]


def decode(
    cls: type[AgentState], key: str | None, raw: dict[str, Any] | None
) -> tuple[BaseModel, dict[str, Any]]:
    """Build the bucket's model from a stored document (None: a new one), migrating it first;
    also give the stored members the model does not declare, which are kept as they are."""
    assert cls.model is not None
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


def encode(cls: type[AgentState], value: BaseModel, kept: dict[str, Any]) -> dict[str, Any]:
    """The JSON document to store for a model: `"_schema"` first when versioned, then the
    undeclared members `kept` from the stored document, then the model's fields."""
    try:
        document = value.model_dump(mode="json", by_alias=True, warnings=False)
    except PydanticSerializationError as exc:
        raise StateValueError(f"{cls.__name__} holds a value that is not JSON: {exc}") from exc
    if kept:
        document = {**kept, **document}
    if cls.schema_version is None:
        return document
    return {SCHEMA_FIELD: cls.schema_version, **document}


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


def check(cls: type[AgentState], key: str | None, document: dict[str, Any]) -> None:
    """Validate a document about to be stored, so a bucket never writes what it cannot load."""
    assert cls.model is not None
    data = {name: value for name, value in document.items() if name != SCHEMA_FIELD}
    try:
        cls.model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(key, exc) from exc


def outdated(cls: type[AgentState], raw: dict[str, Any]) -> bool:
    """Whether a stored document is at an older schema version than the bucket's (so loading
    it migrated it)."""
    return cls.schema_version is not None and raw.get(SCHEMA_FIELD, 1) != cls.schema_version


def upgrade(cls: type[AgentState], key: str | None, raw: dict[str, Any]) -> dict[str, Any]:
    """Run the registered migrations from the document's schema version to the bucket's."""
    target = cls.schema_version
    if target is None:
        return raw
    document = dict(raw)
    version = document.pop(SCHEMA_FIELD, 1)
    if type(version) is not int or version < 1:
        raise StateValidationError(key, SCHEMA_FIELD, f"{version!r} is not a schema version")
    if version > target:
        raise StateValidationError(
            key, SCHEMA_FIELD, f"version {version} is newer than {cls.__name__}'s {target}"
        )
    for step in range(version, target):
        migrate = cls._migrations.get(step)
        if migrate is None:
            raise StateValidationError(
                key, SCHEMA_FIELD, f"{cls.__name__} has no migration from version {step}"
            )
        try:
            document = migrate(document)
        except Exception as exc:  # the user's function: name the key and versions, chain it
            raise StateValidationError(
                key,
                SCHEMA_FIELD,
                f"{cls.__name__}'s migration from version {step} to {step + 1} raised {exc!r}",
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
