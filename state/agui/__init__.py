"""AG-UI layer over the state protocol: the consumer (StateMirror) and its SSE decoding."""

from ._mirror import SkippedDelta, StateMirror
from ._mirror_errors import MalformedEventError, MalformedPatchError, RunHaltedError
from ._sse import SSEDecoder, aiter_sse_events, iter_sse_events

__all__ = [
    "MalformedEventError",
    "MalformedPatchError",
    "RunHaltedError",
    "SSEDecoder",
    "SkippedDelta",
    "StateMirror",
    "aiter_sse_events",
    "iter_sse_events",
]
