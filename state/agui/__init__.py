"""AG-UI layer over the state protocol: the server (AGUIEndpoint), a small client, and the
consumer (StateMirror) with its SSE decoding."""

from ._agent_run import AgentRun
from ._client import AGUIClient, RunRefusedError
from ._endpoint import AGUIEndpoint
from ._mirror import SkippedDelta, StateMirror
from ._mirror_errors import MalformedEventError, MalformedPatchError, RunHaltedError
from ._request import RequestLimits
from ._run_log import RunLogGoneError, RunLogLimits
from ._server_errors import (
    RunInputError,
    RunInputTimeoutError,
    RunInputTooLargeError,
    ThreadDeletingError,
    ThreadNotFoundError,
    ThreadOwnerError,
)
from ._sse import SSEDecoder, aiter_sse_events, iter_sse_events

__all__ = [
    "AGUIClient",
    "AGUIEndpoint",
    "AgentRun",
    "MalformedEventError",
    "MalformedPatchError",
    "RequestLimits",
    "RunHaltedError",
    "RunInputError",
    "RunInputTimeoutError",
    "RunInputTooLargeError",
    "RunLogGoneError",
    "RunLogLimits",
    "RunRefusedError",
    "SSEDecoder",
    "SkippedDelta",
    "StateMirror",
    "ThreadDeletingError",
    "ThreadNotFoundError",
    "ThreadOwnerError",
    "aiter_sse_events",
    "iter_sse_events",
]
