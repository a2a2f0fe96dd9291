"""A run request's body, read and parsed within bounds before anything else looks at it.

The body is received within `body_timeout` seconds and `max_body_bytes`, then parsed as
strict JSON: a duplicate member name, `NaN`/`Infinity`, a number that is not finite or an
integer outside 64 bits is refused, never silently picked or rounded. The messages and the
state are bounded before the request is validated as a `RunAgentInput`, so a hostile
request costs little and is written nowhere.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from ._server_errors import RunInputError, RunInputTimeoutError, RunInputTooLargeError


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one request may cost; each refusal is typed (422 unless said) and writes nothing."""

    max_body_bytes: int = 8_000_000
    """The body (413): room for a 200-run thread with 20 KB messages, resent every run."""
    max_messages: int = 5_000
    """Messages in one request, held by the thread or not."""
    max_new_messages: int = 100
    """Messages one request may add to the thread (each is a document written)."""
    max_state_bytes: int = 1_000_000
    """The client's `state`, encoded as JSON."""
    max_state_depth: int = 32
    """Containers nested in the client's `state`."""
    body_timeout: float = 30.0
    """Seconds to receive the whole body (408): a slowly trickling client is let go."""


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise RunInputError(f"not a valid RunAgentInput: a member name repeats: {twice}")
    return dict(pairs)


def _integer(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise RunInputError(f"not a valid RunAgentInput: {text[:40]} does not fit in 64 bits")
    return value


def _number(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf - inf is nan
        raise RunInputError(f"not a valid RunAgentInput: {text[:40]} is not a finite number")
    return value


def _constant(text: str) -> Any:
    raise RunInputError(f"not a valid RunAgentInput: {text} is not a JSON number")


def parse_body(body: bytes) -> Any:
    """The body as strict JSON; `RunInputError` for anything else (see the module doc)."""
    try:
        return json.loads(
            body,
            object_pairs_hook=_members,
            parse_int=_integer,
            parse_float=_number,
            parse_constant=_constant,
        )
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        if isinstance(exc, RunInputError):
            raise
        raise RunInputError(f"not a valid RunAgentInput: the body is not JSON: {exc}") from None


async def receive_body(chunks: AsyncIterator[bytes], declared: str | None,
                       limits: RequestLimits) -> bytes:  # fmt: skip
    """The whole body, refused when it is (or is declared) larger than allowed or takes
    longer than `body_timeout` to arrive."""
    if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise RunInputTooLargeError(f"the body exceeds {limits.max_body_bytes} bytes")
    body = bytearray()

    async def receive() -> None:
        async for chunk in chunks:
            body.extend(chunk)
            if len(body) > limits.max_body_bytes:
                raise RunInputTooLargeError(f"the body exceeds {limits.max_body_bytes} bytes")

    try:
        await asyncio.wait_for(receive(), limits.body_timeout)
    except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
        raise RunInputTimeoutError(
            f"the body did not arrive within {limits.body_timeout} seconds"
        ) from None
    return bytes(body)


def check_bounds(request: Any, limits: RequestLimits) -> None:
    """Refuse a parsed request with too many messages or too large or deep a state."""
    if not isinstance(request, dict):
        return  # the model's validation says what is wrong
    messages = request.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise RunInputTooLargeError(
            f"{len(messages)} messages in one request; at most {limits.max_messages}"
        )
    state = request.get("state")
    depth = _depth(state, limits.max_state_depth)
    if depth > limits.max_state_depth:
        raise RunInputTooLargeError(
            f"the state nests deeper than {limits.max_state_depth} containers"
        )
    size = len(orjson.dumps(state))
    if size > limits.max_state_bytes:
        raise RunInputTooLargeError(
            f"the state is {size} bytes as JSON; at most {limits.max_state_bytes}"
        )


def _depth(value: Any, limit: int) -> int:
    """How deep `value` nests (counting stops just past `limit`)."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            items = node.values() if isinstance(node, dict) else node
            pending.extend((item, depth) for item in items)
    return deepest
