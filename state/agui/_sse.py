"""Incremental Server-Sent Events decoding (WHATWG rules) into AG-UI events in wire form.

Bytes may arrive split anywhere (inside a UTF-8 sequence, between CR and LF); only `data`
fields matter to AG-UI, each dispatched event's data being one JSON object.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

import orjson

from ._mirror_errors import MalformedEventError

__all__ = ["SSEDecoder", "aiter_sse_events", "iter_sse_events"]

_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEDecoder:
    """Feed byte chunks, get back the complete events they finish, as JSON objects."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last line end (a lone trailing CR is kept here too)
        self._data: list[str] = []
        self._started = False

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """Decode one chunk and return the events it completes, in stream order."""
        return self._lines(self._decoder.decode(chunk), final=False)

    def close(self) -> list[dict[str, Any]]:
        """End of stream: finish the last line; an event without its blank line is dropped."""
        return self._lines(self._decoder.decode(b"", final=True), final=True)

    def _lines(self, text: str, *, final: bool) -> list[dict[str, Any]]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        buffer = self._pending + text
        events: list[dict[str, Any]] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            if match.group() == "\r" and match.end() == len(buffer) and not final:
                break  # a CR at the end may be the first half of CRLF
            self._line(buffer[start : match.start()], events)
            start = match.end()
        self._pending = buffer[start:]
        if final:  # an unterminated last line cannot finish an event: the spec discards it
            self._pending, self._data = "", []
        return events

    def _line(self, line: str, events: list[dict[str, Any]]) -> None:
        if not line:
            if self._data:
                events.append(_event("\n".join(self._data)))
                self._data = []
            return
        name, colon, value = line.partition(":")
        if not name and colon:
            return  # a comment line
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        # event, id and retry (and unknown fields) do not change what an AG-UI event says


def _event(data: str) -> dict[str, Any]:
    """Parse one event's data as a JSON object, raising MalformedEventError otherwise."""
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedEventError(f"SSE data is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise MalformedEventError(f"SSE data must be a JSON object, got {type(event).__name__}")
    return event


def iter_sse_events(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Events of a whole SSE byte stream, yielded as soon as each one is complete."""
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.close()


async def aiter_sse_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """iter_sse_events for an async byte stream (e.g. httpx's response.aiter_bytes())."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
