"""State protocol layer: an RFC 6902 JSON Patch engine under the AG-UI state events."""

from .jsonpatch import (
    PatchConflictError,
    PatchFormatError,
    ProtocolError,
    apply_patch,
    escape,
    make_patch,
    unescape,
    validate_patch,
)

__all__ = [
    "PatchConflictError",
    "PatchFormatError",
    "ProtocolError",
    "apply_patch",
    "escape",
    "make_patch",
    "unescape",
    "validate_patch",
]
