"""The built-in scopes and their storage keys (DESIGN.md "Storage keys")."""

from __future__ import annotations

from ._bucket import AgentState
from ._ids import TurnIds
from ._keys import app_key, conversation_key, session_key, user_key


class UserState(AgentState):
    """One user on one channel, across conversations: `{channel}/users/{user}`."""

    scope = "user"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        channel, user = ids.require(cls.scope, "channel_id", "user_id")
        return user_key(channel, user, namespace=ids.namespace)


class ConversationState(AgentState):
    """Shared by every member of a conversation: `{channel}/conversations/{conversation}`."""

    scope = "conversation"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        channel, conversation = ids.require(cls.scope, "channel_id", "conversation_id")
        return conversation_key(channel, conversation, namespace=ids.namespace)


class SessionState(AgentState):
    """One user in one conversation (an AG-UI thread) with one agent (the app name, when the
    turn has one); the scope of un-prefixed keys."""

    scope = "session"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        channel, conversation, user = ids.require(
            cls.scope, "channel_id", "conversation_id", "user_id"
        )
        return session_key(channel, conversation, user, agent=ids.app_name, namespace=ids.namespace)


class AppState(AgentState):
    """Global to the application, every user and channel: `app/{app_name}`."""

    scope = "app"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        (app_name,) = ids.require(cls.scope, "app_name")
        return app_key(app_name, namespace=ids.namespace)


class TempState(AgentState):
    """Scratch space for one turn, shared by everything in it; never stored."""

    scope = "temp"
    persisted = False


BUILTIN_SCOPES: tuple[type[AgentState], ...] = (
    UserState,
    ConversationState,
    SessionState,
    AppState,
    TempState,
)
