"""The outside ids of a turn, from which every scope computes its storage key."""

from __future__ import annotations

from dataclasses import dataclass

from ._errors import MissingIdError


@dataclass(frozen=True, slots=True)
class TurnIds:
    """Who and where a turn (or a background job) is about; any id may be missing."""

    channel_id: str | None = None
    user_id: str | None = None
    conversation_id: str | None = None
    app_name: str | None = None
    namespace: str | None = None

    def require(self, scope: str, *names: str) -> tuple[str, ...]:
        """Return the named ids, or raise `MissingIdError` naming `scope` and every missing one."""
        values = tuple([getattr(self, name) for name in names])
        if all(values):
            return values
        missing = [name for name, value in zip(names, values, strict=True) if not value]
        raise MissingIdError(scope, missing)
