"""Typed buckets: the model as `data`, in-place edits saved, schema versions and migrations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent_state import (
    Scopes,
    StateConflictError,
    StatePathError,
    StateValidationError,
    StateValueError,
    TurnIds,
    TurnState,
    UserState,
)
from agent_state._bucket import document_of
from agent_state._lifecycle import MERGE_RETRIES, read_turn, save_merging
from agent_state._typed import SCHEMA_FIELD
from agent_state.backends import StoreItem
from agent_state.jsonpatch import apply_patch
from tests.state.conftest import CountingStorage

IDS = TurnIds(channel_id="msteams", user_id="29:ada", conversation_id="19:c", app_name="bot")
KEY = "msteams/users/29:ada"


class Address(BaseModel):
    city: str = ""
    zip: int | None = None


class Profile(BaseModel):
    name: str = ""
    visits: int = 0
    tags: list[str] = Field(default_factory=list)
    address: Address = Field(default_factory=Address)


class ProfileState(UserState):
    model = Profile
    schema_version = 2


@ProfileState.migration(from_version=1)
def _rename_full_name(document: dict[str, Any]) -> dict[str, Any]:
    document["name"] = document.pop("full_name", "")
    return document


class StrictProfile(BaseModel):
    model_config = ConfigDict(validate_assignment=True)
    visits: int = 0


class StrictState(UserState):
    model = StrictProfile


def typed(document: dict[str, Any] | None, etag: str = "1") -> ProfileState:
    return ProfileState(KEY, None if document is None else StoreItem(document, etag))


def test_data_is_the_model_and_a_new_document_gets_defaults() -> None:
    bucket = typed(None)
    assert isinstance(bucket.data, Profile) and bucket.data == Profile()
    assert not bucket.changed and document_of(bucket).pending_write() is None


@pytest.mark.parametrize(
    "edit",
    [
        lambda p: setattr(p, "visits", p.visits + 1),
        lambda p: p.tags.append("vip"),
        lambda p: setattr(p.address, "city", "Paris"),
        lambda p: setattr(p, "address", Address(city="Oslo", zip=1)),
    ],
)
def test_in_place_model_edits_are_saved_as_a_patch(edit: Callable[[Profile], object]) -> None:
    start = {SCHEMA_FIELD: 2, "name": "Ada", "visits": 1, "tags": [], "address": {"city": ""}}
    bucket = typed(dict(start))
    base = bucket.document()
    edit(bucket.data)
    assert bucket.changed
    patch = bucket.changes()
    assert patch and jsonpatch.apply_patch(base, patch) == bucket.document()
    assert apply_patch(base, patch) == bucket.document()
    item = document_of(bucket).pending_write()
    assert item is not None and item.value[SCHEMA_FIELD] == 2 and item.etag == "1"
    assert Profile.model_validate({k: v for k, v in item.value.items() if k != SCHEMA_FIELD}) == (
        bucket.data
    )


def test_dict_interface_reads_and_sets_fields() -> None:
    bucket = typed({"name": "Ada", SCHEMA_FIELD: 2})
    assert bucket["name"] == "Ada" and bucket.get("visits") == 0 and "tags" in bucket
    assert "nope" not in bucket and bucket.get("nope", "d") == "d"
    assert list(bucket) == ["name", "visits", "tags", "address"] and len(bucket) == 4
    bucket["visits"] = 3
    assert bucket.data.visits == 3 and bucket.changed
    with pytest.raises(StatePathError):
        del bucket["name"]
    bucket.clear()
    assert bucket.data == Profile()


def test_old_documents_are_migrated_on_load_and_upgraded_when_saved() -> None:
    bucket = typed({"full_name": "Ada Lovelace", "visits": 4})  # no "_schema": version 1
    assert bucket.data.name == "Ada Lovelace" and bucket.data.visits == 4
    assert not bucket.changed  # reading an old document does not write it
    bucket.data.visits += 1
    item = document_of(bucket).pending_write()
    assert item is not None and item.value[SCHEMA_FIELD] == 2 and "full_name" not in item.value


def test_explicit_old_version_is_migrated() -> None:
    assert typed({SCHEMA_FIELD: 1, "full_name": "Grace"}).data.name == "Grace"


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({SCHEMA_FIELD: 2, "visits": "many"}, "visits"),
        ({SCHEMA_FIELD: 2, "address": {"zip": "abc"}}, "address.zip"),
        ({SCHEMA_FIELD: 2, "tags": ["ok", 3]}, "tags.1"),
        ({SCHEMA_FIELD: 3}, SCHEMA_FIELD),
        ({SCHEMA_FIELD: "2"}, SCHEMA_FIELD),
        ({SCHEMA_FIELD: 0}, SCHEMA_FIELD),
    ],
)
def test_invalid_stored_documents_name_the_key_and_field(
    document: dict[str, Any], field: str
) -> None:
    bucket = typed(document)
    with pytest.raises(StateValidationError) as info:
        _ = bucket.data
    assert info.value.key == KEY and info.value.field == field
    assert KEY in str(info.value) and field in str(info.value)


def test_missing_migration_is_a_validation_error() -> None:
    class V3(UserState):
        model = Profile
        schema_version = 3

    @V3.migration(from_version=2)
    def _noop(document: dict[str, Any]) -> dict[str, Any]:
        return document

    with pytest.raises(StateValidationError, match="no migration from version 1") as info:
        _ = V3(KEY, StoreItem({"name": "x"}, "1")).data
    assert info.value.field == SCHEMA_FIELD
    assert V3(KEY, StoreItem({SCHEMA_FIELD: 2, "name": "x"}, "1")).data.name == "x"


def test_migrations_run_in_order_and_subclasses_inherit_them() -> None:
    class V3(ProfileState):
        schema_version = 3

    @V3.migration(from_version=2)
    def _count_twice(document: dict[str, Any]) -> dict[str, Any]:
        document["visits"] = document.get("visits", 0) * 2
        return document

    data = V3(KEY, StoreItem({"full_name": "Ada", "visits": 2}, "1")).data
    assert (data.name, data.visits) == ("Ada", 4)
    assert 2 not in ProfileState._migrations  # the parent's registry is untouched


def test_migration_registration_is_checked() -> None:
    with pytest.raises(ValueError):
        ProfileState.migration(from_version=2)
    with pytest.raises(ValueError):
        ProfileState.migration(from_version=1)  # already registered
    with pytest.raises(ValueError):
        UserState.migration(from_version=1)  # not versioned
    with pytest.raises(TypeError):

        class Unversionable(UserState):
            schema_version = 2  # without a model


def test_migration_must_return_a_dict() -> None:
    class Broken(UserState):
        model = Profile
        schema_version = 2

    Broken.migration(from_version=1)(lambda document: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(StateValidationError, match="did not return a dict"):
        _ = Broken(KEY, StoreItem({}, "1")).data


def test_invalid_edits_fail_before_anything_is_written() -> None:
    bucket = typed(None)
    bucket.data.visits = "lots"  # no validate_assignment
    with pytest.raises(StateValidationError) as info:
        document_of(bucket).pending_write()
    assert info.value.field == "visits" and info.value.key == KEY


def test_non_json_model_values_fail_before_saving() -> None:
    class Loose(BaseModel):
        anything: object = None

    class LooseState(UserState):
        model = Loose

    bucket = LooseState(KEY)
    bucket.data.anything = object()
    with pytest.raises(StateValueError):
        document_of(bucket).pending_write()


def test_validate_assignment_errors_name_the_key_and_field() -> None:
    bucket = StrictState(KEY)
    with pytest.raises(StateValidationError) as info:
        bucket["visits"] = "many"
    assert (info.value.key, info.value.field) == (KEY, "visits")


def test_data_setter_takes_a_model_instance() -> None:
    bucket = typed(None)
    bucket.data = Profile(name="Ada")
    assert bucket["name"] == "Ada" and bucket.changed
    with pytest.raises(StateValueError):
        bucket.data = {"name": "Ada"}


async def save(storage: CountingStorage, state: TurnState, *, retries: int = MERGE_RETRIES) -> None:
    await save_merging(storage, state.stored_documents(), retries=retries)


async def test_typed_bucket_in_a_turn_round_trips(storage: CountingStorage) -> None:
    state = await read_turn(storage, IDS, Scopes([ProfileState]))
    assert isinstance(state.user, ProfileState)
    state.user.data.tags.append("vip")
    state.set("user.address.city", "Paris")
    assert state.get("user.address.city") == "Paris" and state["user:visits"] == 0
    await save(storage, state)
    stored = await storage.stored(KEY)
    assert stored is not None and stored[SCHEMA_FIELD] == 2
    assert stored["tags"] == ["vip"] and stored["address"]["city"] == "Paris"

    again = await read_turn(storage, IDS, Scopes([ProfileState]))
    assert again.user.data.address.city == "Paris"
    await save(storage, again)
    assert len(storage.writes) == 1  # reading a typed bucket writes nothing


async def test_set_path_into_a_strict_model_names_the_field(storage: CountingStorage) -> None:
    state = TurnState(IDS, [StrictState])
    with pytest.raises(StateValidationError) as info:
        state.set("user.visits", "many")
    assert info.value.field == "visits"


def test_setting_a_field_the_model_lacks_is_a_path_error() -> None:
    state = TurnState(IDS, [ProfileState])
    setters: tuple[Callable[[], object], ...] = (
        lambda: state.user.__setitem__("nickname", "x"),
        lambda: state.__setitem__("user:nickname", "x"),
        lambda: state.set("user.address.country", "FR"),
    )
    for set_it in setters:
        with pytest.raises(StatePathError, match="no field"):
            set_it()
    assert document_of(state.user).pending_write() is None


def test_a_model_that_allows_extra_fields_takes_new_ones() -> None:
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        name: str = ""

    class OpenState(UserState):
        model = Open

    bucket = OpenState(KEY)
    bucket["nickname"] = "Ada"
    assert bucket["nickname"] == "Ada" and document_of(bucket).pending_write().value == {
        "name": "",
        "nickname": "Ada",
    }


async def test_typed_turns_merge_changes_to_different_fields(storage: CountingStorage) -> None:
    await storage.write({KEY: StoreItem({SCHEMA_FIELD: 2, "name": "Ada", "visits": 1}, None)})
    a = await read_turn(storage, IDS, Scopes([ProfileState]))
    b = await read_turn(storage, IDS, Scopes([ProfileState]))
    a.user.data.tags.append("vip")
    await save(storage, a)
    b.set("user.address.city", "Paris")  # a path write reads nothing, so it merges
    await save(storage, b)
    merged = await storage.stored(KEY)
    assert merged is not None and merged["tags"] == ["vip"]
    assert merged["address"]["city"] == "Paris" and merged["visits"] == 1
    assert b.user.data.tags == ["vip"] and b.user.data.address.city == "Paris"


async def test_a_typed_turn_that_used_its_model_does_not_merge(storage: CountingStorage) -> None:
    """`data` hands out the whole model: the turn may have read any of it."""
    await storage.write({KEY: StoreItem({SCHEMA_FIELD: 2, "name": "Ada", "visits": 1}, None)})
    a = await read_turn(storage, IDS, Scopes([ProfileState]))
    b = await read_turn(storage, IDS, Scopes([ProfileState]))
    a.user.data.visits += 1
    await save(storage, a)
    b.user.data.tags.append("vip")
    with pytest.raises(StateConflictError):
        await save(storage, b)
    assert (await storage.stored(KEY) or {})["visits"] == 2


class Plain(BaseModel):
    name: str = ""
    visits: int = 0


class PlainState(UserState):
    model = Plain


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = ""


class ClosedState(UserState):
    model = Closed


async def test_members_the_model_does_not_declare_are_kept_on_save(
    storage: CountingStorage,
) -> None:
    await storage.write({KEY: StoreItem({"name": "Ada", "visits": 8, "plan": "pro"}, None)})
    state = await read_turn(storage, IDS, Scopes([PlainState]))
    state.user.data.visits += 1
    await save(storage, state)
    assert await storage.stored(KEY) == {"plan": "pro", "name": "Ada", "visits": 9}
    again = await read_turn(storage, IDS, Scopes([PlainState]))
    assert again.user.data.visits == 9 and "plan" not in again.user  # not a field of the model


async def test_a_model_that_forbids_extra_members_refuses_them_by_name(
    storage: CountingStorage,
) -> None:
    await storage.write({KEY: StoreItem({"name": "Ada", "plan": "pro"}, None)})
    state = await read_turn(storage, IDS, Scopes([ClosedState]))
    with pytest.raises(StateValidationError) as info:
        state.user.data  # noqa: B018
    assert info.value.field == "plan"


async def test_a_migrated_document_is_saved_migrated_when_the_turn_writes(
    storage: CountingStorage,
) -> None:
    """A turn that read an old document (migrated on load) and writes anything stores that
    document migrated in the same batch, even though it did not change it."""
    await storage.write({KEY: StoreItem({"full_name": "Ada", "visits": 4}, None)})
    storage.writes.clear()
    state = await read_turn(storage, IDS, Scopes([ProfileState]))
    assert state.user.data.name == "Ada" and not state.user.changed
    state["conversation:topic"] = "billing"
    await save(storage, state)
    assert storage.writes == [sorted([KEY, "msteams/conversations/19:c"])]
    stored = await storage.stored(KEY)
    assert stored is not None and stored[SCHEMA_FIELD] == 2 and stored["name"] == "Ada"
    assert "full_name" not in stored

    again = await read_turn(storage, IDS, Scopes([ProfileState]))
    assert again.user.data.name == "Ada"
    again["conversation:topic"] = "sales"
    await save(storage, again)
    assert storage.writes[-1] == ["msteams/conversations/19:c"]  # stored migrated: no rewrite


async def test_a_turn_that_only_reads_a_migrated_document_writes_nothing(
    storage: CountingStorage,
) -> None:
    await storage.write({KEY: StoreItem({"full_name": "Ada"}, None)})
    storage.writes.clear()
    state = await read_turn(storage, IDS, Scopes([ProfileState]))
    assert state.user.data.name == "Ada"
    await save(storage, state)
    assert storage.writes == []
    assert await storage.stored(KEY) == {"full_name": "Ada"}  # migrated again on each read
