"""One JSON rule on every path: assignment, in-place edits (at save), and Storage.write."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from agent_state import StateValueError, TurnIds, TurnState, open_turn
from agent_state.backends import InvalidValueError, MemoryStorage, StoreItem
from agent_state.backends._json import MAX_DEPTH

IDS = TurnIds(channel_id="c", user_id="u", conversation_id="k", app_name="a")


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int = 1


class Model(BaseModel):
    x: int = 1


def nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        node["a"] = {}
        node = node["a"]
    return root


def cyclic() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


NOT_JSON = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "tuple": (1, 2),
    "set": {1},
    "non-str key": {1: "x"},
    "datetime": datetime.datetime(2026, 1, 1),
    "uuid": uuid.UUID(int=1),
    "enum": Color.RED,
    "int enum": Level.HIGH,
    "decimal": decimal.Decimal("1.5"),
    "dataclass": Point(),
    "pydantic model": Model(),
    "too big int": 2**70,
    "too deep": nested(MAX_DEPTH + 10),
    "very deep": nested(10_000),
    "cyclic": cyclic(),
}


@pytest.mark.parametrize("value", NOT_JSON.values(), ids=NOT_JSON.keys())
async def test_assignment_refuses_what_is_not_json(value: object) -> None:
    storage = MemoryStorage()
    with pytest.raises(StateValueError) as info:
        async with open_turn(storage, IDS) as state:
            state["user:x"] = value
    assert isinstance(info.value, InvalidValueError)  # one error family on every path
    assert await storage.read(["c/users/u"]) == {}


@pytest.mark.parametrize("value", NOT_JSON.values(), ids=NOT_JSON.keys())
async def test_in_place_edits_are_checked_at_save_and_nothing_is_written(value: object) -> None:
    storage = MemoryStorage()
    with pytest.raises(StateValueError):
        async with open_turn(storage, IDS) as state:
            state["session:ok"] = 1
            state["user:readings"] = []
            state.get("user.readings").append(value)
    assert await storage.read(["c/users/u", "c/conversations/k/users/u"]) == {}


@pytest.mark.parametrize("value", NOT_JSON.values(), ids=NOT_JSON.keys())
async def test_storage_write_refuses_what_is_not_json(value: object) -> None:
    storage = MemoryStorage()
    with pytest.raises(InvalidValueError):
        await storage.write({"k/ok": StoreItem({"a": 1}), "k/bad": StoreItem({"v": value})})
    assert await storage.read(["k/ok", "k/bad"]) == {}


def test_the_message_names_the_place_and_the_limit() -> None:
    storage = MemoryStorage()
    with pytest.raises(InvalidValueError, match=r"NaN.*'/readings/1'"):
        storage._prepare("k/a", StoreItem({"readings": [1.0, float("nan")]}))
    with pytest.raises(InvalidValueError, match=f"deeper than {MAX_DEPTH}"):
        storage._prepare("k/a", StoreItem(nested(10_000)))
    with pytest.raises(InvalidValueError, match="cyclic"):
        storage._prepare("k/a", StoreItem({"c": cyclic()}))


async def test_json_values_and_shared_subtrees_are_accepted() -> None:
    shared = [1, 2]
    value = {"a": shared, "b": shared, "f": -0.0, "i": 2**63, "n": None, "t": True, "s": "é"}
    value["deep"] = nested(MAX_DEPTH - 2)  # with the bucket root and "v": the limit exactly
    storage = MemoryStorage()
    async with open_turn(storage, IDS) as state:
        state["user:v"] = value
    assert (await storage.read(["c/users/u"]))["c/users/u"].value == {"v": value}


@pytest.mark.parametrize(
    "edit",
    [
        lambda state: state.user.data["readings"].append(float("nan")),
        lambda state: state.get("user.box.readings").append((1, 2)),
        lambda state: state.user["box"]["readings"].append(Color.RED),
    ],
    ids=["through data", "through a nested path", "through a member"],
)
async def test_in_place_edits_through_any_handed_out_container_are_checked(
    edit: Callable[[TurnState], object],
) -> None:
    storage = MemoryStorage()
    async with open_turn(storage, IDS) as state:
        state["user:readings"] = [1.0]
        state["user:box"] = {"readings": [1.0]}
    with pytest.raises(StateValueError):
        async with open_turn(storage, IDS) as state:
            edit(state)
    stored = (await storage.read(["c/users/u"]))["c/users/u"].value
    assert stored == {"readings": [1.0], "box": {"readings": [1.0]}}
