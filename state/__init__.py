"""agent-state: scoped, persistent state for bots and AI agents.

The names most handlers and jobs need; submodules hold the rest.
"""

from .activity import Activity, ChannelAccount, ConversationAccount
from .app import AgentApplication
from .background import (
    edit_state,
    list_conversations,
    list_users,
    open_state,
    open_user,
    read_state,
)
from .bucket import AgentState
from .context import TurnContext
from .errors import (
    MissingIdError,
    ScopeError,
    StateConflictError,
    StateError,
    StatePathError,
    StateValidationError,
    StateValueError,
)
from .ids import TurnIds
from .scopes import AppState, ConversationState, SessionState, TempState, UserState
from .turn_state import TurnState

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
