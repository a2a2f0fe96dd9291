"""Errors of the AG-UI consumer: what makes a stream unusable, told apart from a stale delta."""

from __future__ import annotations

from typing import Any

from ..jsonpatch import PatchFormatError, ProtocolError


class MalformedEventError(ProtocolError, ValueError):
    """An event (or the SSE frame carrying it) is structurally invalid; the run cannot go on."""


class MalformedPatchError(MalformedEventError, PatchFormatError):
    """A STATE_DELTA's patch is malformed; index and operation name the culprit, or are None."""

    def __init__(self, message: str, index: int | None, operation: Any) -> None:
        super().__init__(message, index, operation)  # all in args, so the error survives pickling
        self.message = message
        self.index = index
        self.operation = operation

    def __str__(self) -> str:
        return self.message


class RunHaltedError(ProtocolError):
    """The mirror refuses events: this run already delivered a fatal event (see .cause)."""

    def __init__(self, run_id: str | None, cause: ProtocolError) -> None:
        super().__init__(run_id, cause)
        self.run_id = run_id
        self.cause = cause

    def __str__(self) -> str:
        return f"run {self.run_id!r} was halted by a fatal event: {self.cause}"
