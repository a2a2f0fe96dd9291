"""SSE decoding: the ag-ui encoder's output, split anywhere, gives back the same events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from ag_ui.core import (
    MessagesSnapshotEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from hypothesis import given
from hypothesis import strategies as st

from agent_state.agui import MalformedEventError, SSEDecoder, StateMirror, iter_sse_events

EVENTS = [
    RunStartedEvent(thread_id="t", run_id="r"),
    StateSnapshotEvent(snapshot={"text": "héllo ✓ 🎉", "n": [1, 2]}),
    StateDeltaEvent(delta=[{"op": "add", "path": "/n/-", "value": 3}]),
    MessagesSnapshotEvent(messages=[UserMessage(id="m", content="line1\nline2")]),
]
STREAM = "".join(EventEncoder().encode(event) for event in EVENTS).encode()
WIRE = [event.model_dump(mode="json", by_alias=True) for event in EVENTS]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@given(st.lists(st.integers(0, 10_000), max_size=30))
def test_encoder_output_split_anywhere_decodes_to_the_same_events(cuts: list[int]) -> None:
    assert list(iter_sse_events(split(STREAM, cuts))) == WIRE


def test_one_byte_at_a_time_through_the_mirror() -> None:
    mirror = StateMirror()
    mirror.consume_sse(STREAM[i : i + 1] for i in range(len(STREAM)))
    assert mirror.state == {"text": "héllo ✓ 🎉", "n": [1, 2, 3]}
    assert mirror.messages == [{"id": "m", "role": "user", "content": "line1\nline2"}]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings_comments_fields_and_multiline_data(newline: str) -> None:
    lines = [
        "\ufeff: a comment",
        "event: ignored",
        "id: 7",
        'data: {"type": "STATE_SNAPSHOT",',
        'data:"snapshot": 1}',
        "",
        "retry: 10",
        "",
        'data: {"type": "CUSTOM", "name": "n", "value": null}',
        "",
    ]
    data = newline.join(lines).encode() + newline.encode()
    chunks = [data[i : i + 1] for i in range(len(data))]
    assert list(iter_sse_events(chunks)) == [
        {"type": "STATE_SNAPSHOT", "snapshot": 1},
        {"type": "CUSTOM", "name": "n", "value": None},
    ]


def test_an_event_without_its_blank_line_at_the_end_is_dropped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"type": "RAW", "event": 1}\n\ndata: {"type": "RAW"') == [
        {"type": "RAW", "event": 1}
    ]
    assert decoder.close() == []


@pytest.mark.parametrize("data", [b"data: {not json}\n\n", b"data: [1]\n\n"])
def test_data_that_is_not_a_json_object_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedEventError):
        list(iter_sse_events([data]))


def test_async_byte_streams() -> None:
    async def body() -> AsyncIterator[bytes]:
        for i in range(0, len(STREAM), 7):
            yield STREAM[i : i + 7]

    mirror = StateMirror()
    asyncio.run(mirror.aconsume_sse(body()))
    assert mirror.state == {"text": "héllo ✓ 🎉", "n": [1, 2, 3]}
