"""A development state inspector: a Starlette app that browses and edits any store.

`inspector_app(storage)` lists users, conversations, sessions and app state (keys parsed
with `parse_key`), shows a document's JSON, version, TTL, size and the documents under it
(a session's history pages and runs), and edits a document with a write conditional on the
version shown. It answers loopback clients only unless built with `allow_remote=True`;
`agent-state serve --inspect` serves it (docs/operations.md).
"""

from ._app import inspector_app
from ._guard import InspectorConfigError, check_bind_host

__all__ = ["InspectorConfigError", "check_bind_host", "inspector_app"]
