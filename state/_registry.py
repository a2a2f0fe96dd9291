"""`open_storage(url)`: pick a backend by URL scheme, importing optional SDKs only when used."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from ._keys import write_group
from .backends import Storage, StorageConfigError

_SCHEMES: dict[str, str] = {
    "memory": "agent_state.backends._memory:MemoryStorage",
    "redis": "agent_state.backends.redis.storage:RedisStorage",
    "rediss": "agent_state.backends.redis.storage:RedisStorage",
    "file": "agent_state.backends.file.storage:FileStorage",
    "azure-blob": "agent_state.backends.blob.storage:BlobStorage",
    "cosmos": "agent_state.backends.cosmos.storage:CosmosStorage",
}


def open_storage(url: str, **options: Any) -> Storage:
    """Create a storage from a URL such as `memory://` or `file://./state` or `file:///abs`.

    Extra keyword options go to the backend's `from_url` (and from there, where it passes
    them on, to its constructor); one neither accepts raises `StorageConfigError` before
    anything is created. Every storage gets the key scheme's `write_group`, so all clients
    of one store lay its keys out alike. The backends' `from_url` refuse unknown URL options.
    """
    options.setdefault("write_group", write_group)
    if not isinstance(url, str) or "://" not in url:
        raise StorageConfigError(f"storage URL must look like 'scheme://...', got {url!r}")
    scheme = urlsplit(url).scheme.lower()
    target = _SCHEMES.get(scheme)
    if target is None:
        known = ", ".join(f"{name}://" for name in sorted(_SCHEMES))
        raise StorageConfigError(f"unknown storage scheme {scheme!r}; known: {known}")
    module_name, class_name = target.split(":")
    factory = getattr(importlib.import_module(module_name), class_name)
    known_options = _keywords(factory)
    unknown = sorted(set(options) - known_options) if known_options is not None else []
    if unknown:
        raise StorageConfigError(
            f"unknown option(s) for {scheme}:// storage: {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known_options or ()))}"
        )
    storage: Storage = factory.from_url(url, **options)
    return storage


def _keywords(factory: Any) -> set[str] | None:
    """The keyword options `factory.from_url` takes: its own, plus the constructor's optional
    ones where it passes `**options` on to the constructor; None if anything goes."""
    own, passes_on = _parameters(factory.from_url, skip=("url",))
    if not passes_on:
        return own
    constructor, takes_any = _parameters(factory, skip=())
    return None if takes_any else own | constructor


def _parameters(function: Callable[..., Any], skip: Iterable[str]) -> tuple[set[str], bool]:
    """Names `function` takes as optional keywords (minus `skip`); whether it takes `**any`."""
    parameters = inspect.signature(function).parameters.values()
    names = {
        parameter.name
        for parameter in parameters
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and parameter.default is not parameter.empty
    }
    takes_any = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
    return names - set(skip), takes_any
