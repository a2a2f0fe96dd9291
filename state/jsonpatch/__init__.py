"""RFC 6902 JSON Patch: validate, apply atomically, diff, and rebase analysis (stdlib only)."""

from ._apply import apply_patch, validate_patch
from ._diff import make_patch
from ._errors import DepthLimitError, PatchConflictError, PatchFormatError, ProtocolError
from ._pointer import escape, unescape
from ._rebase import rebase_patch
from ._values import MAX_DEPTH

__all__ = [
    "MAX_DEPTH",
    "DepthLimitError",
    "PatchConflictError",
    "PatchFormatError",
    "ProtocolError",
    "apply_patch",
    "escape",
    "make_patch",
    "rebase_patch",
    "unescape",
    "validate_patch",
]
