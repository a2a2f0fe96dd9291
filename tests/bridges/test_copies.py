"""The ADK bridge's copy of the events it keeps: a copy equals the original and shares no
container or model with it or with another copy, whatever the event holds."""

from __future__ import annotations

from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types
from pydantic import BaseModel, ConfigDict

from agent_state.bridges._copies import deep_copy


class Loose(BaseModel):
    """A model with extra fields (copied by `copy.deepcopy`)."""

    model_config = ConfigDict(extra="allow")
    items: list[Any] = []


def shared(one: Any, other: Any) -> list[str]:
    """Where `one` and `other` hold the same container or model object."""
    found: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if isinstance(a, (str, int, float, bool, bytes)) or a is None:
            return
        if a is b:
            found.append(where)
        if isinstance(a, BaseModel):
            walk(a.__dict__, b.__dict__, where + ".__dict__")
            walk(a.__pydantic_extra__, b.__pydantic_extra__, where + ".extra")
        elif isinstance(a, dict):
            for key in a:
                walk(a[key], b[key], f"{where}[{key!r}]")
        elif isinstance(a, (list, tuple, set, frozenset)):
            for i, (x, y) in enumerate(zip(sorted(a, key=repr), sorted(b, key=repr), strict=True)):
                walk(x, y, f"{where}[{i}]")

    walk(one, other, "")
    return found


def test_copies_equal_the_event_and_share_nothing() -> None:
    event = Event(
        invocation_id="inv",
        author="model",
        content=types.Content(role="model", parts=[types.Part(text="a"), types.Part(text="b")]),
        actions=EventActions(state_delta={"deep": {"list": [1, {"x": [2]}]}, "flat": 1}),
        long_running_tool_ids={"t1", "t2"},
        custom_metadata={"loose": Loose(items=[[1]], more={"k": [3]}), "pair": (1, [2])},
    )
    first, second = deep_copy(event), deep_copy(event)
    assert first == event == second
    assert first.model_fields_set == event.model_fields_set
    assert shared(first, event) == [] and shared(first, second) == []
    first.custom_metadata["loose"].more["k"].append(4)
    first.actions.state_delta["deep"]["list"][1]["x"].append(5)
    assert event == second and second.actions.state_delta["deep"]["list"][1]["x"] == [2]


def test_a_copy_keeps_the_private_state_of_a_model() -> None:
    from google.adk.sessions import Session

    session = Session(id="s", app_name="a", user_id="u", state={"k": [1]})
    session._storage_update_marker = "m:1"
    copied = deep_copy(session)
    assert copied == session and copied._storage_update_marker == "m:1"
    assert shared(copied, session) == []


def test_the_copiers_kept_per_type_stay_bounded() -> None:
    """Model classes made at run time do not grow the table of copiers without end."""
    from pydantic import create_model

    from agent_state.bridges import _copies

    for n in range(_copies.TYPES_REMEMBERED + 10):
        model = create_model(f"Made{n}", items=(list[int], []))(items=[n])
        copied = deep_copy(model)
        assert copied == model and copied.items is not model.__dict__["items"]
    assert len(_copies._BY_TYPE) <= _copies.TYPES_REMEMBERED
