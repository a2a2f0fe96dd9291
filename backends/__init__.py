"""Storage backends: one contract (`Storage`), one error set, one stored envelope."""

from ._base import ANY, SharedItem, Storage, StoreItem
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
from ._file import FileStorage
from ._memory import MemoryStorage
from ._registry import open_storage

__all__ = [
    "ANY",
    "ConflictError",
    "FileStorage",
    "FormatError",
    "InvalidKeyError",
    "InvalidValueError",
    "MemoryStorage",
    "SharedItem",
    "StateTooLargeError",
    "Storage",
    "StorageConfigError",
    "StorageError",
    "StorageUnavailableError",
    "StoreItem",
    "open_storage",
]
