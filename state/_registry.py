"""`open_storage(url)`: pick a backend by URL scheme, importing optional SDKs only when used."""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from ._keys import write_group
from .backends import Storage, StorageConfigError

_SCHEMES: dict[str, str] = {
    "memory": "agent_state.backends._memory:MemoryStorage",
    "redis": "agent_state.backends._redis:RedisStorage",
    "rediss": "agent_state.backends._redis:RedisStorage",
    "file": "agent_state.backends._file:FileStorage",
    "azure-blob": "agent_state.backends._blob:BlobStorage",
    "cosmos": "agent_state.backends._cosmos:CosmosStorage",
}


def open_storage(url: str, **options: Any) -> Storage:
    """Create a storage from a URL such as `memory://` or `file://./state` or `file:///abs`.

    Extra keyword options go to the backend's constructor. Every storage gets the key
    scheme's `write_group`, so all clients of one store lay its keys out alike.
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
    storage: Storage = (
        factory.from_url(url, **options) if hasattr(factory, "from_url") else factory(**options)
    )
    return storage
