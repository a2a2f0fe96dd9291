"""agent-state: scoped, persistent state for bots and AI agents.

Every public name of the core has this one import path; storage backends are in
`agent_state.backends`, the RFC 6902 engine in `agent_state.jsonpatch`, the AG-UI layer in
`agent_state.agui`.
"""

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
from ._bucket import AgentState
from ._context import TurnContext
from ._delivery import ActivityConflictError
from ._errors import (
    MissingIdError,
    ScopeError,
    StateClosedError,
    StateConflictError,
    StateError,
    StatePathError,
    StateValidationError,
    StateValueError,
)
from ._history import History, HistoryError
from ._ids import TurnIds
from ._keys import (
    ParsedKey,
    app_key,
    conversation_key,
    escape_segment,
    parse_key,
    session_key,
    unescape_segment,
    user_key,
    write_group,
)
from ._lifecycle import open_turn
from ._plan import Scopes
from ._registry import open_storage
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

__all__ = [
    "Activity",
    "ActivityConflictError",
    "ActivityError",
    "AgentApplication",
    "AgentState",
    "AppState",
    "ChannelAccount",
    "ConversationAccount",
    "ConversationState",
    "History",
    "HistoryError",
    "MissingIdError",
    "ParsedKey",
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
    "TurnState",
    "UserState",
    "accept_run",
    "app_key",
    "cancel_run",
    "conversation_key",
    "edit_state",
    "escape_segment",
    "execute_run",
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
    "session_key",
    "thread",
    "unescape_segment",
    "user_key",
    "write_group",
]
