"""A run's untrusted input turned into changes of its thread, checked before anything is kept.

A thread is a session (of one agent: the endpoint's app name). Two framework documents sit
beside it, written with its turns: `C/agui-owner/{app name}` (under the conversation `C`:
which user the agent's thread belongs to, claimed by its first run) and `S/agui` (what the
server last sent the thread, the last message of its history then, and the calls of the
client's tools still unanswered). A client may add a tool message only as the one answer
to such a call. The client's edits are the difference between its `state` and what
was last sent; they are rebased onto the stored state like any concurrent change: kept where
they touch other members, dropped where the server changed the same member (the run's
STATE_SNAPSHOT then resyncs the client). A client whose messages are held by the history
but stop before that last message (another tab ran since) saw an older state the server no
longer knows: its state is not taken as edits at all, so it never undoes a later run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic

from ag_ui.core import RunAgentInput

from .. import (
    AgentState,
    Record,
    TurnState,
    check_message,
    thread_owner_key,
    thread_sent_key,
)
from ..jsonpatch import PatchConflictError, apply_patch, make_patch, rebase_patch
from ._exposed import ExposedState, M
from ._server_errors import (
    RunInputError,
    RunInputTooLargeError,
    ThreadDeletingError,
    ThreadNotFoundError,
    ThreadOwnerError,
)

FORMAT: Final = 2
CLIENT_ROLES: Final = frozenset({"user", "tool"})
"""Roles of the messages a client may add to the history (activity messages are dropped)."""


class Owner(Record):
    """`C/agui-owner/{app name}`: the user a thread belongs to; with `deleting` (epoch
    seconds), the thread is being deleted and counts as gone (`ThreadService.delete`)."""

    kind = "agui_owner"
    format = FORMAT
    fields = {"user": str}


class SentState(Record):
    """`S/agui`: what the server last sent the thread (`sent`) and the id of the last message
    of its history then (`last`), a client holding that message saw that state; and the
    calls of the client's tools the thread still waits on (`pending`: call id -> tool)."""

    kind = "agui_sent"
    format = FORMAT
    fields = {"sent": dict, "last": (str, type(None)), "pending": dict}


@dataclass(slots=True)
class ThreadInput(Generic[M]):
    """A run's input as it applies to the thread now."""

    state: M
    """The stored state with the client's kept edits (validated)."""
    stored_view: dict[str, Any]
    """The exposed state as stored before the run."""
    messages: list[dict[str, Any]]
    """The client's messages the history does not hold yet, to append."""
    sent: Record
    """The thread's `S/agui` record (`SentState`), saved with the run's turn."""
    pending: dict[str, str]
    """Calls of the client's tools still unanswered once these messages are added."""
    through: str | None
    """The last of the client's messages the history already holds (a compact reference
    to the thread's history as the client sent it)."""


def _wire_messages(run_input: RunAgentInput) -> list[dict[str, Any]]:
    """The input's messages in wire form (camelCase, no nulls), as the history keeps them."""
    return [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in run_input.messages]


async def read_input(
    turn: TurnState,
    exposed: ExposedState[M],
    run_input: RunAgentInput,
    *,
    claim: bool,
    max_new_messages: int,
) -> ThreadInput[M]:
    """The run's input against the thread in `turn`: `ThreadOwnerError` for another user's
    thread, `ThreadDeletingError` for one being deleted (and, without `claim`,
    `ThreadNotFoundError` for one deleted), `RunInputError` for messages or state the
    client may not write (more than `max_new_messages` new ones: `RunInputTooLargeError`).
    With `claim`, a thread without an owner becomes the turn's user's (saved with the
    turn)."""
    conversation, session = _key(turn.conversation), _key(turn.session)
    owner_key = thread_owner_key(conversation, turn.ids.app_name)
    owner, sent = await turn.fetch({owner_key: Owner,
                                    thread_sent_key(session): SentState})  # fmt: skip
    _check_owner(owner, str(turn.ids.user_id), claim=claim)
    sent_messages = _wire_messages(run_input)
    messages = await _new_messages(turn, sent_messages, max_new_messages)
    last_sent = sent.stored()
    pending = _answer(messages, dict(last_sent["pending"]) if last_sent is not None else {})
    fresh_ids = {m["id"] for m in messages}
    held = [m["id"] for m in sent_messages if m["id"] not in fresh_ids]
    known = set(held)
    client = exposed.check_client(run_input.state)
    stored = exposed.load(turn.session)
    stored_view = exposed.view(stored)
    if last_sent is None:
        base = stored_view  # the thread never sent state: edits are taken against the stored
    elif not known or last_sent["last"] is None or last_sent["last"] in known:
        base = last_sent["sent"]  # the client saw the last state sent (or tells no history)
    else:  # its history stops before the last run (another tab ran since): it saw an older
        base = {**stored_view, **client}  # state, unknown now; the server's state wins
    ours = make_patch(base, {**base, **client})
    theirs = make_patch(base, stored_view)
    kept, _ = rebase_patch(base, ours, theirs)  # clashing edits are dropped: the server wins
    try:
        merged = apply_patch(stored_view, kept) if kept else stored_view
    except PatchConflictError:  # the edits no longer fit the newer state: the server's wins
        merged = stored_view
    state = exposed.validate(merged, stored)
    return ThreadInput(state, stored_view, messages, sent, pending, held[-1] if held else None)


def _answer(messages: list[dict[str, Any]], pending: dict[str, str]) -> dict[str, str]:
    """`pending` less the calls the client's tool messages answer; `RunInputError` for a
    tool message that answers no unanswered call of a client tool (or answers one twice)."""
    for message in messages:
        if message["role"] != "tool":
            continue
        call = message.get("toolCallId")
        if call not in pending:
            raise RunInputError(
                f"tool message {message['id']!r} answers no unanswered call of a tool the "
                f"client executes (call {call!r:.80})"
            )
        del pending[call]
    return pending


async def _new_messages(
    turn: TurnState, messages: list[dict[str, Any]], limit: int
) -> list[dict[str, Any]]:
    ids = [check_message(m)["id"] for m in messages]
    if len(set(ids)) != len(ids):
        raise RunInputError(
            f"messages repeat an id: {sorted(i for i in set(ids) if ids.count(i) > 1)}"
        )
    held = await turn.history.holds(ids) if messages else set()
    fresh = [m for m in messages if m["id"] not in held and m["role"] != "activity"]
    if len(fresh) > limit:
        raise RunInputTooLargeError(f"{len(fresh)} new messages in one request; at most {limit}")
    refused = [f"{m['id']!r} ({m['role']})" for m in fresh if m["role"] not in CLIENT_ROLES]
    if refused:
        raise RunInputError(
            f"a client may add only user and tool messages to the thread, not {refused}"
        )
    return fresh


def _check_owner(owner: Record, user: str, *, claim: bool) -> None:
    """Reading the owner record makes it a read check of the turn: a delete's mark written
    meanwhile refuses the turn's commit, and its next attempt stops here."""
    stored = owner.stored()
    if stored is None:
        if not claim:  # the run was accepted, so its thread had an owner: it was deleted
            raise ThreadNotFoundError("the thread was deleted")
        owner.value.update(format=FORMAT, user=user)
    elif "deleting" in stored:
        raise ThreadDeletingError("the thread is being deleted: DELETE it to finish")
    elif stored["user"] != user:
        raise ThreadOwnerError("this thread belongs to another user")


def _key(bucket: AgentState) -> str:
    key = bucket.key
    if key is None:
        raise RunInputError("an AG-UI run needs a user and a thread")
    return key
