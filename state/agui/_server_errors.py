"""Errors of the AG-UI server: each maps to one HTTP status before the stream starts."""

from __future__ import annotations

from .. import StateError


class RunInputError(StateError, ValueError):
    """A run's input is refused (HTTP 422): not a valid `RunAgentInput`, state the client may
    not write or that fails the exposed model, or messages it may not add. Nothing is written."""

    status_code = 422


class RunInputTooLargeError(RunInputError):
    """A run's request exceeds the endpoint's `RequestLimits`: its body's bytes, its
    messages, its state's size or depth (HTTP 413)."""

    status_code = 413


class RunInputTimeoutError(RunInputError):
    """A run's request body did not arrive within the limits' `body_timeout` (HTTP 408)."""

    status_code = 408


class ThreadOwnerError(StateError, PermissionError):
    """The thread belongs to another user (HTTP 403). Nothing is written."""

    status_code = 403


class ThreadNotFoundError(StateError, LookupError):
    """No such thread of this agent (HTTP 404): it was never run, or it was deleted."""

    status_code = 404


class ThreadDeletingError(StateError):
    """A run of a thread whose delete has begun (HTTP 409): refused before anything is
    written; a DELETE of the thread finishes the delete, then the id is free again."""

    status_code = 409
