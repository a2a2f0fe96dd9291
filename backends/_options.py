"""Options of a storage URL and of `from_url` keywords, read one way by every backend.

A URL's query options must each be known to the backend and given once; a value is read as
the type its option has (text, flag, seconds, count, one of a few choices). Anything else
raises `StorageConfigError` naming the option, before a client or connection exists.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from urllib.parse import parse_qsl

from ._errors import StorageConfigError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


class UrlOptions:
    """The query options of one storage URL, checked when parsed and read by name and type.

    `known` are the names the backend reads; `refused` maps names it knows but refuses in
    this URL to why (e.g. TLS options on a plain connection). Readers return None for an
    option the URL does not give.
    """

    __slots__ = ("scheme", "_values")

    def __init__(
        self,
        scheme: str,
        query: str,
        known: Collection[str],
        refused: Mapping[str, str] | None = None,
    ) -> None:
        self.scheme = scheme
        self._values: dict[str, str] = {}
        pairs = parse_qsl(query, keep_blank_values=True)
        for name, _ in pairs:
            if refused and name in refused:
                raise StorageConfigError(f"{scheme}:// option {name!r} {refused[name]}")
        unknown = sorted({name for name, _ in pairs} - set(known))
        if unknown:
            raise StorageConfigError(
                f"unknown {scheme}:// option(s) {', '.join(map(repr, unknown))};"
                f" known: {', '.join(sorted(known))}"
            )
        for name, value in pairs:
            if name in self._values:
                raise StorageConfigError(f"{scheme}:// option {name!r} is given twice")
            self._values[name] = value

    def text(self, name: str, choices: Sequence[str] | None = None) -> str | None:
        """The option's text; with `choices`, it must be one of them (case-insensitive)."""
        value = self._values.get(name)
        if value is not None and choices is not None and value.lower() not in choices:
            raise StorageConfigError(
                f"{self._label(name)} must be {' or '.join(choices)}, got {value!r}"
            )
        return value

    def flag(self, name: str) -> bool | None:
        value = self._values.get(name)
        return None if value is None else flag(self._label(name), value)

    def seconds(self, name: str) -> float | None:
        value = self._values.get(name)
        return None if value is None else seconds(self._label(name), value)

    def count(self, name: str) -> int | None:
        value = self._values.get(name)
        return None if value is None else count(self._label(name), value)

    def _label(self, name: str) -> str:
        return f"{self.scheme}:// option {name}"


def flag(name: str, value: str | bool) -> bool:
    """A yes/no option: a bool, or one of the words in `TRUE` / `FALSE`."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in TRUE:
        return True
    if isinstance(value, str) and value.lower() in FALSE:
        return False
    raise StorageConfigError(f"{name} must be true or false, got {value!r}")


def seconds(name: str, value: str | float) -> float:
    """A duration option: a positive, finite number of seconds (or its text)."""
    number = math.nan
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    if not 0 < number < math.inf:
        raise StorageConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    return number


def count(name: str, value: str | int) -> int:
    """A count option: a whole number of at least 1 (or its decimal text)."""
    number = 0
    if isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value)
    elif type(value) is int:
        number = value
    if number < 1:
        raise StorageConfigError(f"{name} must be a positive whole number, got {value!r}")
    return number
