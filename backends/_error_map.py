"""From SDK and OS exceptions to the project's errors, by a table each backend declares.

A backend lists `Rule`s: which exceptions (and, optionally, which of them by a test) mean
what (`Meaning`). `ErrorMap.meaning` tells a call what an exception means where it turns
into an outcome (a conflict, a missing item); `unavailable(what, table)` is the context a
call runs in, raising `StorageConfigError` or `StorageUnavailableError` for the rest.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType
from typing import Any

from ._errors import StorageConfigError, StorageError, StorageUnavailableError


class Meaning(enum.Enum):
    """What an SDK or OS exception says about the call that raised it."""

    EXISTS = "exists"
    """A create met an item that exists: the call's outcome is a conflict."""
    MODIFIED = "modified"
    """A version precondition failed: the call's outcome is a conflict."""
    MISSING = "missing"
    """The item is not there: a read finds nothing, a conditional write conflicts."""
    REFUSED = "refused"
    """The store refused the configuration (credentials, a missing container): the caller
    must fix it, so it is a `StorageConfigError`."""
    UNAVAILABLE = "unavailable"
    """The store failed or could not be reached: `StorageUnavailableError`."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of a backend's table: exceptions of `errors` (for which `when` holds, if given)
    mean `meaning`; `says` explains it in the error message."""

    errors: type[BaseException] | tuple[type[BaseException], ...]
    meaning: Meaning
    when: Callable[[Any], bool] | None = None
    says: str = ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (SDK errors run to many), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ErrorMap:
    """A backend's table of `Rule`s, tried in order; the first that matches decides."""

    __slots__ = ("rules", "describe")

    def __init__(
        self, rules: Sequence[Rule], describe: Callable[[BaseException], str] = first_line
    ) -> None:
        self.rules = tuple(rules)
        self.describe = describe
        """How an exception is quoted in the error raised for it."""

    def meaning(self, exc: BaseException) -> Meaning | None:
        """What `exc` means by the table; None if no rule matches."""
        rule = self._rule(exc)
        return rule.meaning if rule is not None else None

    def error(self, what: str, exc: BaseException) -> StorageError | None:
        """The project's error for `exc` raised while doing `what`; None if no rule matches.

        An outcome (`EXISTS`, `MODIFIED`, `MISSING`) the call did not handle is a failure
        of the store: `StorageUnavailableError`.
        """
        rule = self._rule(exc)
        if rule is None:
            return None
        detail = self.describe(exc)
        message = f"{what}: {rule.says} ({detail})" if rule.says else f"{what}: {detail}"
        if rule.meaning is Meaning.REFUSED:
            return StorageConfigError(message)
        return StorageUnavailableError(message)

    def _rule(self, exc: BaseException) -> Rule | None:
        for rule in self.rules:
            if isinstance(exc, rule.errors) and (rule.when is None or rule.when(exc)):
                return rule
        return None


@lru_cache(maxsize=64)
def _all_unavailable(errors: tuple[type[BaseException], ...]) -> ErrorMap:
    """The table in which each of `errors` means the store is unavailable."""
    return ErrorMap([Rule(errors, Meaning.UNAVAILABLE)], describe=str)


class unavailable:  # lower case: used like a function, `with unavailable(what, errors):`
    """The context of one call: an exception `errors` maps (a table, or a tuple of types that
    each mean the store is unavailable) leaves as the project's error, cause chained; other
    exceptions, and the project's own errors, pass unchanged. A class, not a generator,
    since every call of a backend enters one."""

    __slots__ = ("what", "errors")

    def __init__(self, what: str, errors: ErrorMap | tuple[type[BaseException], ...]) -> None:
        self.what, self.errors = what, errors

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, StorageError):
            return
        table = self.errors if isinstance(self.errors, ErrorMap) else _all_unavailable(self.errors)
        error = table.error(self.what, exc)
        if error is not None:
            raise error from exc
