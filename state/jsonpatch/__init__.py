"""State protocol layer: an RFC 6902 JSON Patch engine under the AG-UI state events."""

from ._apply import apply_patch, validate_patch
from ._diff import make_patch
from ._errors import PatchConflictError, PatchFormatError, ProtocolError
from ._pointer import escape, unescape

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
