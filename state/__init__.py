"""agent-state: scoped, persistent state for bots and AI agents.

Every public name of the core has this one import path; storage backends are in
`agent_state.backends`, the RFC 6902 engine in `agent_state.jsonpatch`, the AG-UI layer in
`agent_state.agui`.

The root is lazy (PEP 562): a name's module is imported on first access, so
`import agent_state.backends` or `agent_state.jsonpatch` loads no core module and no pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._activity import Activity, ActivityError, ChannelAccount, ConversationAccount
    from ._app import AgentApplication
    from ._background import (
        edit_state,
        list_conversations,
        list_users,
        open_state,
        open_user,
        read_state,
    )
    from ._backup import (
        BackupReport,
        IncompleteExportError,
        RestoreReport,
        UnlistableStoreError,
        export_store,
        import_store,
    )
    from ._bucket import AgentState
    from ._context import TurnContext
    from ._delivery import ActivityClaimedError, ActivityConflictError
    from ._document import DELIVERED, Record
    from ._errors import (
        MissingIdError,
        ScopeError,
        StateClosedError,
        StateConflictError,
        StateError,
        StatePathError,
        StateValidationError,
        StateValueError,
        UndeclaredScopeError,
    )
    from ._events import add_event_listener
    from ._forget import UnknownUserError, UserDataReport, export_user, forget_user
    from ._history import History, HistoryError, check_message
    from ._ids import TurnIds
    from ._keys import (
        ParsedKey,
        app_key,
        conversation_key,
        escape_segment,
        parse_key,
        run_key,
        session_key,
        thread_index_key,
        thread_owner_key,
        thread_record_key,
        thread_sent_key,
        unescape_segment,
        user_key,
        write_group,
    )
    from ._lifecycle import open_turn
    from ._plan import Scopes
    from ._queue import TurnQueues
    from ._registry import open_storage
    from ._regroup import RegroupReport, earlier_write_group, regroup
    from ._runs import (
        Run,
        RunConflictError,
        RunStateError,
        Selection,
        accept_run,
        cancel_run,
        execute_run,
        literal,
        model_messages,
        next_turn,
        open_run,
        thread,
    )
    from ._scopes import AppState, ConversationState, SessionState, TempState, UserState
    from ._turn_state import TurnState

# Each public name and the internal module that defines it.
_HOMES = {
    "Activity": "._activity",
    "ActivityClaimedError": "._delivery",
    "ActivityConflictError": "._delivery",
    "ActivityError": "._activity",
    "AgentApplication": "._app",
    "AgentState": "._bucket",
    "AppState": "._scopes",
    "BackupReport": "._backup",
    "ChannelAccount": "._activity",
    "ConversationAccount": "._activity",
    "ConversationState": "._scopes",
    "DELIVERED": "._document",
    "History": "._history",
    "HistoryError": "._history",
    "IncompleteExportError": "._backup",
    "MissingIdError": "._errors",
    "ParsedKey": "._keys",
    "RestoreReport": "._backup",
    "Run": "._runs",
    "RunConflictError": "._runs",
    "Record": "._document",
    "RunStateError": "._runs",
    "ScopeError": "._errors",
    "Scopes": "._plan",
    "Selection": "._runs",
    "SessionState": "._scopes",
    "StateClosedError": "._errors",
    "StateConflictError": "._errors",
    "StateError": "._errors",
    "StatePathError": "._errors",
    "StateValidationError": "._errors",
    "StateValueError": "._errors",
    "TempState": "._scopes",
    "TurnContext": "._context",
    "TurnQueues": "._queue",
    "TurnIds": "._ids",
    "TurnState": "._turn_state",
    "UndeclaredScopeError": "._errors",
    "UnknownUserError": "._forget",
    "UnlistableStoreError": "._backup",
    "UserDataReport": "._forget",
    "UserState": "._scopes",
    "accept_run": "._runs",
    "add_event_listener": "._events",
    "app_key": "._keys",
    "cancel_run": "._runs",
    "check_message": "._history",
    "conversation_key": "._keys",
    "edit_state": "._background",
    "escape_segment": "._keys",
    "export_store": "._backup",
    "export_user": "._forget",
    "forget_user": "._forget",
    "regroup": "._regroup",
    "RegroupReport": "._regroup",
    "earlier_write_group": "._regroup",
    "import_store": "._backup",
    "list_conversations": "._background",
    "list_users": "._background",
    "literal": "._runs",
    "model_messages": "._runs",
    "next_turn": "._runs",
    "open_run": "._runs",
    "execute_run": "._runs",
    "thread": "._runs",
    "thread_index_key": "._keys",
    "thread_owner_key": "._keys",
    "thread_record_key": "._keys",
    "thread_sent_key": "._keys",
    "open_state": "._background",
    "open_storage": "._registry",
    "open_turn": "._lifecycle",
    "open_user": "._background",
    "parse_key": "._keys",
    "read_state": "._background",
    "run_key": "._keys",
    "session_key": "._keys",
    "unescape_segment": "._keys",
    "user_key": "._keys",
    "write_group": "._keys",
}

__all__ = [
    "DELIVERED",
    "Activity",
    "ActivityClaimedError",
    "ActivityConflictError",
    "ActivityError",
    "AgentApplication",
    "AgentState",
    "AppState",
    "BackupReport",
    "ChannelAccount",
    "ConversationAccount",
    "ConversationState",
    "History",
    "HistoryError",
    "IncompleteExportError",
    "MissingIdError",
    "ParsedKey",
    "Record",
    "RestoreReport",
    "Run",
    "RunConflictError",
    "RunStateError",
    "ScopeError",
    "Scopes",
    "Selection",
    "SessionState",
    "StateClosedError",
    "StateConflictError",
    "StateError",
    "StatePathError",
    "StateValidationError",
    "StateValueError",
    "TempState",
    "TurnContext",
    "TurnIds",
    "TurnQueues",
    "TurnState",
    "UndeclaredScopeError",
    "UnknownUserError",
    "UnlistableStoreError",
    "UserDataReport",
    "UserState",
    "accept_run",
    "add_event_listener",
    "app_key",
    "cancel_run",
    "check_message",
    "conversation_key",
    "edit_state",
    "escape_segment",
    "execute_run",
    "export_store",
    "export_user",
    "forget_user",
    "regroup",
    "RegroupReport",
    "earlier_write_group",
    "import_store",
    "list_conversations",
    "list_users",
    "literal",
    "model_messages",
    "next_turn",
    "open_run",
    "open_state",
    "open_storage",
    "open_turn",
    "open_user",
    "parse_key",
    "read_state",
    "run_key",
    "session_key",
    "thread",
    "thread_index_key",
    "thread_owner_key",
    "thread_record_key",
    "thread_sent_key",
    "unescape_segment",
    "user_key",
    "write_group",
]

if not TYPE_CHECKING:  # hidden from mypy, which then reports a misspelled name instead of Any

    def __getattr__(name: str) -> object:
        """Import the module a public name lives in on first access and keep the name here."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names too, before their first access."""
    return sorted({*globals(), *__all__})
