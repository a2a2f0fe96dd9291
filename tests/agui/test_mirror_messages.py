"""StateMirror message rules: MESSAGES_SNAPSHOT reconciliation, streamed message events and the
messages of the next run's input."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui.core import MessagesSnapshotEvent, UserMessage

from agent_state.agui import MalformedEventError, RunHaltedError, StateMirror


def user(ident: str, text: str = "hi") -> dict[str, Any]:
    return {"id": ident, "role": "user", "content": text}


def activity(ident: str, step: str = "plan") -> dict[str, Any]:
    return {"id": ident, "role": "activity", "activityType": "progress", "content": {"s": step}}


def reasoning(ident: str, text: str = "thinking") -> dict[str, Any]:
    return {"id": ident, "role": "reasoning", "content": text}


def snap(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"type": "MESSAGES_SNAPSHOT", "messages": list(messages)}


def ids(mirror: StateMirror) -> list[str]:
    return [message["id"] for message in mirror.messages]


def test_snapshot_replaces_in_place_appends_unseen_and_drops_absent() -> None:
    mirror = StateMirror(messages=[user("a"), user("b"), user("c")])
    mirror.apply(snap(user("d"), user("c", "new c"), user("a", "new a"), user("e")))
    assert ids(mirror) == ["a", "c", "d", "e"]  # held order kept, unseen in snapshot order
    assert mirror.messages[0]["content"] == "new a" and mirror.messages[1]["content"] == "new c"


def test_activity_and_reasoning_survive_a_snapshot_without_their_role() -> None:
    mirror = StateMirror(messages=[user("u1"), activity("act"), reasoning("why"), user("u2")])
    mirror.apply(snap(user("u1"), user("u3")))
    assert ids(mirror) == ["u1", "act", "why", "u3"]


def test_a_snapshot_with_an_activity_message_declares_the_whole_activity_set() -> None:
    mirror = StateMirror(messages=[activity("act1"), reasoning("why"), activity("act2")])
    mirror.apply(snap(activity("act2", "done")))
    # act1 is dropped (the snapshot carries activity); reasoning is kept (it carries none).
    assert ids(mirror) == ["why", "act2"] and mirror.messages[1]["content"] == {"s": "done"}


def test_a_snapshot_with_a_reasoning_message_declares_the_whole_reasoning_set() -> None:
    mirror = StateMirror(messages=[reasoning("r1"), activity("act"), reasoning("r2")])
    mirror.apply(snap(reasoning("r3")))
    assert ids(mirror) == ["act", "r3"]


def test_the_exception_is_self_revoking_per_snapshot() -> None:
    mirror = StateMirror(messages=[activity("act")])
    mirror.apply(snap(user("u")))
    assert ids(mirror) == ["act", "u"]
    mirror.apply(snap(user("u"), activity("other")))
    assert ids(mirror) == ["u", "other"]


def test_one_id_twice_in_a_snapshot_keeps_the_last_content_at_the_first_place() -> None:
    mirror = StateMirror(messages=[user("held", "old")])
    mirror.apply(
        snap(
            user("new", "1st"), user("held", "a"), user("x"), user("new", "2nd"), user("held", "b")
        )
    )
    assert ids(mirror) == ["held", "new", "x"]
    assert [m["content"] for m in mirror.messages] == ["b", "2nd", "hi"]


def test_a_snapshot_of_models_is_kept_in_wire_form() -> None:
    mirror = StateMirror()
    mirror.apply(MessagesSnapshotEvent(messages=[UserMessage(id="m", content="hi")]))
    assert mirror.messages == [{"id": "m", "role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param({"id": "m"}, id="not-a-list"),
        pytest.param([{"role": "user", "content": "no id"}], id="no-id"),
        pytest.param([{"id": "m", "role": 7, "content": "x"}], id="mistyped-role"),
        pytest.param([{"id": "m", "content": "x"}], id="no-role"),
        pytest.param([user("ok"), 3], id="not-an-object"),
    ],
)
def test_a_malformed_messages_snapshot_is_fatal_and_changes_nothing(messages: Any) -> None:
    mirror = StateMirror(messages=[user("kept")])
    with pytest.raises(MalformedEventError):
        mirror.apply({"type": "MESSAGES_SNAPSHOT", "messages": messages})
    assert ids(mirror) == ["kept"]
    with pytest.raises(RunHaltedError):
        mirror.apply(snap(user("later")))


def test_a_message_of_an_unknown_role_is_dropped_and_the_rest_reconciles(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The AG-UI rule for unrecognised members: drop with a warning, keep the run going."""
    mirror = StateMirror(messages=[user("kept"), user("gone")])
    wizard = {"id": "w", "role": "wizard", "content": "x"}
    mirror.apply({"type": "MESSAGES_SNAPSHOT", "messages": [user("kept", "new"), wizard]})
    assert mirror.messages == [{"id": "kept", "role": "user", "content": "new"}]
    assert mirror.halted is None and "unknown message role 'wizard'" in caplog.text
    mirror.apply(snap(user("kept"), user("later")))
    assert ids(mirror) == ["kept", "later"]


def test_next_input_leaves_activity_messages_out() -> None:
    mirror = StateMirror(messages=[user("u"), activity("act"), reasoning("why")])
    run_input = mirror.next_input()
    assert [message.id for message in run_input.messages] == ["u", "why"]
    assert ids(mirror) == ["u", "act", "why"]


def test_messages_persist_across_runs() -> None:
    mirror = StateMirror(thread_id="t", messages=[user("u1")])
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})
    mirror.apply({"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"})
    mirror.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "hel"})
    mirror.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "lo"})
    mirror.apply({"type": "TEXT_MESSAGE_END", "messageId": "a1"})
    mirror.apply({"type": "RUN_STARTED", "threadId": "t", "runId": "r2"})
    assert mirror.messages[-1] == {"id": "a1", "role": "assistant", "content": "hello"}
    assert [message.id for message in mirror.next_input().messages] == ["u1", "a1"]


def test_streamed_tool_calls_and_results() -> None:
    mirror = StateMirror(messages=[user("u")])
    mirror.apply({"type": "TEXT_MESSAGE_START", "messageId": "a", "role": "assistant"})
    mirror.apply(
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "parentMessageId": "a"}
    )
    mirror.apply({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"q":'})
    mirror.apply({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "1}"})
    mirror.apply({"type": "TOOL_CALL_END", "toolCallId": "c1"})
    mirror.apply({"type": "TEXT_MESSAGE_START", "messageId": "later", "role": "assistant"})
    mirror.apply(
        {"type": "TOOL_CALL_RESULT", "messageId": "res", "toolCallId": "c1", "content": "42"}
    )
    assert ids(mirror) == ["u", "a", "res", "later"]  # the result follows its call
    call = mirror.messages[1]["toolCalls"][0]
    assert call == {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"q":1}'},
    }
    assert mirror.messages[2] == {"id": "res", "role": "tool", "content": "42", "toolCallId": "c1"}
    mirror.apply({"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "g"})
    assert mirror.messages[-1]["id"] == "c2" and mirror.messages[-1]["role"] == "assistant"


def test_streamed_events_for_unknown_ids_do_not_break_the_mirror() -> None:
    mirror = StateMirror(messages=[activity("act")])
    mirror.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "ghost", "delta": "x"})
    mirror.apply({"type": "TEXT_MESSAGE_CONTENT", "messageId": "act", "delta": "x"})
    mirror.apply({"type": "TEXT_MESSAGE_START", "messageId": "act"})
    mirror.apply({"type": "TOOL_CALL_ARGS", "toolCallId": "ghost", "delta": "x"})
    mirror.apply({"type": "TOOL_CALL_END", "toolCallId": "ghost"})
    mirror.apply({"type": "TEXT_MESSAGE_END", "messageId": "ghost"})
    assert mirror.messages == [activity("act")] and mirror.halted is None


def test_a_tool_result_with_a_held_id_replaces_that_message() -> None:
    mirror = StateMirror(messages=[user("u"), user("dup")])
    mirror.apply(
        {"type": "TOOL_CALL_RESULT", "messageId": "dup", "toolCallId": "c", "content": "r"}
    )
    assert ids(mirror) == ["u", "dup"] and mirror.messages[1]["role"] == "tool"


def test_a_streamed_event_without_its_ids_is_malformed() -> None:
    with pytest.raises(MalformedEventError, match="messageId"):
        StateMirror().apply({"type": "TEXT_MESSAGE_CONTENT", "delta": "x"})
