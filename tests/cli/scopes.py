"""A typed scope at schema version 2, for `agent-state migrate --scope tests.cli.scopes:Profile`.

Version 1 stored `full_name`; version 2 calls it `name`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agent_state import UserState


class ProfileModel(BaseModel):
    name: str
    visits: int = 0


class Profile(UserState):
    model = ProfileModel
    schema_version = 2


@Profile.migration(1)
def _rename(document: dict[str, Any]) -> dict[str, Any]:
    document = dict(document)
    document["name"] = document.pop("full_name")
    return document


class Untyped(UserState):
    """No schema version: nothing to migrate."""
