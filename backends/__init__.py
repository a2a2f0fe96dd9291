"""Storage backends: one contract (`Storage`), one error set, one stored envelope."""

from .base import ANY, SharedItem, Storage, StoreItem
from .errors import (
    ConflictError,
    FormatError,
    InvalidKeyError,
    InvalidValueError,
    StateTooLargeError,
    StorageConfigError,
    StorageError,
    StorageUnavailableError,
)
from .file import FileStorage
from .memory import MemoryStorage
from .registry import open_storage

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
