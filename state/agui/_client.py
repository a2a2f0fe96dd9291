"""A small AG-UI client: POST a `RunAgentInput`, get the run's events as the package's models.

For tests and Python front ends. `transport` lets it talk to an ASGI app in process
(`httpx.ASGITransport(app)`) as well as to a server over the network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from ag_ui.core import Event, RunAgentInput
from pydantic import TypeAdapter, ValidationError

from ..jsonpatch import ProtocolError
from ._mirror_errors import MalformedEventError
from ._sse import aiter_sse_events

_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


class RunRefusedError(ProtocolError):
    """The server refused the run before streaming it: an HTTP error status (`.status_code`,
    `.detail`) where the event stream should be."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class AGUIClient:
    """Runs an agent at `url`; `headers` carry the application's credentials."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.url = url
        self._http = httpx.AsyncClient(headers=dict(headers or {}), transport=transport,
                                       timeout=timeout)  # fmt: skip

    async def __aenter__(self) -> AGUIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def run(self, run_input: RunAgentInput | Mapping[str, Any]) -> list[Event]:
        """All events of one run, in order."""
        return [event async for event in self.stream(run_input)]

    async def stream(self, run_input: RunAgentInput | Mapping[str, Any]) -> AsyncIterator[Event]:
        """The run's events as they arrive; `RunRefusedError` for an error status,
        `MalformedEventError` for a frame that is no AG-UI event."""
        body = (run_input if isinstance(run_input, RunAgentInput)
                else RunAgentInput.model_validate(run_input))  # fmt: skip
        wire = body.model_dump_json(by_alias=True, exclude_none=True)
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        async with self._http.stream("POST", self.url, content=wire, headers=headers) as reply:
            if reply.status_code != 200:
                await reply.aread()
                raise RunRefusedError(reply.status_code, _detail(reply))
            async for data in aiter_sse_events(reply.aiter_bytes()):
                try:
                    yield _EVENT.validate_python(data)
                except ValidationError as exc:
                    raise MalformedEventError(f"not an AG-UI event: {exc}") from None


def _detail(reply: httpx.Response) -> str:
    try:
        return str(reply.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return reply.text
