"""JSON Patch errors, split so that callers can tell a malformed patch from a stale one."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class for every error of the state protocol layer."""


class PatchFormatError(ProtocolError, ValueError):
    """The patch is malformed (RFC 6902 section 3/4 structure); no document could accept it."""


class PatchConflictError(ProtocolError):
    """A well-formed patch could not be applied to this document; nothing was changed."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(index, reason)  # both in args, so the error survives pickling
        self.index = index
        self.reason = reason

    def __str__(self) -> str:
        return f"operation {self.index}: {self.reason}"


class DepthLimitError(ProtocolError, ValueError):
    """A document or value nests deeper than the engine walks (`limit` containers)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit

    def __str__(self) -> str:
        return f"value nests deeper than {self.limit} containers, the engine's limit"
