"""Storage backends: one contract (`Storage`), one error set, one stored envelope.

Backends whose SDK is an optional extra (`RedisStorage`, `BlobStorage`, `CosmosStorage`)
are imported on first use, so `import agent_state.backends` needs none of the SDKs. The
names for writing a backend of your own (`PreparedWrite`, `CONFLICT`, `Outcomes`, the
helpers and the envelope) are here too; `agent_state.backends.testing` checks one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._base import Storage, WriteGroup, expired, whole_key
from ._envelope import Envelope, unwrap, wrap
from ._error_map import unavailable
from ._errors import (
    ConflictError,
    FormatError,
    InvalidKeyError,
    InvalidValueError,
    StateTooLargeError,
    StorageConfigError,
    StorageError,
    StorageUnavailableError,
)
from ._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, precondition_holds
from ._memory import MemoryStorage
from .file.storage import FileStorage

if TYPE_CHECKING:
    from .blob.storage import BlobStorage
    from .cosmos.storage import CosmosStorage
    from .redis.storage import RedisStorage

_OPTIONAL = {
    "RedisStorage": ".redis.storage",
    "BlobStorage": ".blob.storage",
    "CosmosStorage": ".cosmos.storage",
}

__all__ = [
    "ANY",
    "BlobStorage",
    "CONFLICT",
    "ConflictError",
    "CosmosStorage",
    "Envelope",
    "FileStorage",
    "FormatError",
    "InvalidKeyError",
    "InvalidValueError",
    "MemoryStorage",
    "Outcomes",
    "PreparedWrite",
    "RedisStorage",
    "StateTooLargeError",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "StorageUnavailableError",
    "StoreItem",
    "WriteGroup",
    "expired",
    "precondition_holds",
    "unavailable",
    "unwrap",
    "whole_key",
    "wrap",
]


def __getattr__(name: str) -> Any:
    module = _OPTIONAL.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
