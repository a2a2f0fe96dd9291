"""agent-state: scoped, persistent state for bots and AI agents.

The names most handlers and jobs need; submodules hold the rest.
"""

from ._activity import Activity, ChannelAccount, ConversationAccount
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
from ._errors import (
    MissingIdError,
    ScopeError,
    StateConflictError,
    StateError,
    StatePathError,
    StateValidationError,
    StateValueError,
)
from ._ids import TurnIds
from ._scopes import AppState, ConversationState, SessionState, TempState, UserState
from ._turn_state import TurnState

__all__ = [
    "Activity",
    "AgentApplication",
    "AgentState",
    "AppState",
    "ChannelAccount",
    "ConversationAccount",
    "ConversationState",
    "MissingIdError",
    "ScopeError",
    "SessionState",
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
    "edit_state",
    "list_conversations",
    "list_users",
    "open_state",
    "open_user",
    "read_state",
]
