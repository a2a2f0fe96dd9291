"""Exactly once per activity: evidence of a processed activity, inside a document the turn writes.

A channel may deliver one activity twice (retries, redelivery after a timeout). A turn with an
activity id leaves evidence of it (a digest of the activity and its replies, sealed so that
the entry names no one: `state/_seal.py`) in the reserved
member `DELIVERED` of one of the bucket documents it writes anyway, in the same conditional
write: the first of the documents it writes in `Plan.evidence` order (session, user,
conversation, app, then custom scopes), or, when it changed nothing, its home: the first of
that order (among the scopes its route may use) that was stored when the turn read it, else
the user bucket (which, unlike a new session, needs no index entry), written with the
evidence alone. So a turn with an id
writes exactly the documents its buckets changed, or one. A redelivery reads the same
documents (the same activity takes the same route, so reads the same scopes), finds the
evidence in the turn's one read and gets the first replies back without running the handler;
the same id with other content is an `ActivityConflictError`. A reply is kept as what the
activity's own `reply()` would not give back (a text reply: its text alone): the digest
guarantees a redelivery is the same activity, so it rebuilds the rest, and every turn that
reads or writes the document decodes and encodes only that much.

Bounds: an entry lives `retention` seconds (ignored once older, dropped at the document's next
write) and a document keeps the newest `EVIDENCE_LIMIT` entries. Entries are named by
channel, conversation and activity id (`evidence_name`), since the user and app documents
hold entries from many conversations; without a conversation, by channel and one hash of the
user and activity ids, so that shared documents hold no user id.

Two deliveries running at once in different processes: the later save conflicts with the
first whenever both touched a document in common, which turns whose changes depend only on
the state and the activity always do (the same reads give the same writes, and the evidence
goes into one of them); the conflicting turn runs again and finds the evidence. A handler
whose writes depend on time, chance or the outside world, or that has outside effects, claims
its activity instead (`claim=True`): before its handler runs, the turn writes a claim entry
(living `lease` seconds) into its home document, a conditional write, so of the processes that
get the activity at once only one runs the handler; the others raise `ActivityClaimedError`.
The claimed turn's evidence replaces the claim in the home document, conditionally on the
claim still being there. A claim whose turn never saved refuses the activity until the lease
ends; then a delivery runs the route again, so the activity is never lost.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any, NamedTuple

from ._activity import Activity, wire_of
from ._document import DELIVERED, Merge
from ._errors import StateError
from ._ids import TurnIds
from ._keys import escape_segment
from ._seal import Fingerprint, fingerprint, seal, unseal
from ._turn_state import TurnState
from .backends import ConflictError, FormatError, Storage

RETENTION_SECONDS = 24 * 3600.0
"""How long a processed activity is remembered by default."""
CLAIM_LEASE_SECONDS = 300.0
"""How long a claim holds an activity whose turn has not saved, by default."""
EVIDENCE_LIMIT = 32
"""How many activities' evidence one document keeps at most (the newest)."""
CLAIM_RETRIES = 3
"""How many times a claim is written again onto a newer version of its document that another
writer changed (not with a claim of this activity) meanwhile."""


class ActivityConflictError(StateError, ValueError):
    """An activity id that was already processed arrived again with other content."""

    def __init__(self, activity_id: str) -> None:
        self.activity_id = activity_id
        super().__init__(
            f"activity {activity_id!r} was already processed with other content; "
            "an id must name one activity"
        )


class ActivityClaimedError(StateError):
    """A claimed route's activity is claimed by another delivery whose turn has not saved yet
    (or whose process died less than the lease ago): the handler does not run again now. A
    later delivery gets the first replies once that turn saved, or runs the route once the
    lease ended with nothing saved."""

    def __init__(self, activity_id: str) -> None:
        self.activity_id = activity_id
        super().__init__(
            f"activity {activity_id!r} is claimed by another delivery still being processed "
            "(or that died less than its lease ago); deliver it again later"
        )


class Delivery(NamedTuple):
    """What a turn with an activity id knows of its delivery: the name of the activity's
    evidence entry (`evidence_name`), its `Fingerprint` (`digest`) and how long evidence
    counts (`retention`, seconds)."""

    name: str
    printed: Fingerprint
    retention: float


def evidence_prefix(ids: TurnIds) -> str:
    """What the name of an activity's evidence entry is made from besides the activity id:
    `{channel}/c/{conversation}/` (ids are unique per conversation), or without a
    conversation `{channel}/u/{user}`, which `evidence_name` hashes with the activity id. The
    same for every activity of given ids: keep it per ids."""
    channel = escape_segment(ids.channel_id or "", what="channel id")
    if ids.conversation_id:
        return f"{channel}/c/{escape_segment(ids.conversation_id, what='conversation id')}/"
    return f"{channel}/u/{escape_segment(ids.user_id or '', what='user id')}"


def evidence_name(prefix: str, activity_id: str) -> str:
    """The name of an activity's evidence entry, from its ids' `evidence_prefix`: the prefix
    and the activity id, or for a user's prefix `{channel}/u/` and a hash of both (an entry
    may lie in a shared document: its name must not hold the user's id)."""
    escaped = escape_segment(activity_id, what="activity id")
    if prefix[-1] == "/":
        return prefix + escaped
    channel, _, _ = prefix.split("/", 2)
    hashed = hashlib.blake2b(f"{prefix}/{escaped}".encode(), digest_size=16).hexdigest()
    return f"{channel}/u/{hashed}"


def digest(activity: Activity, wire: dict[str, Any] | None = None) -> Fingerprint:
    """The activity's `Fingerprint`: its content's digest, to tell a redelivery from a reused
    id, and the key its replies are sealed with (`wire`: its JSON form, `wire_of`, when the
    caller holds it already)."""
    return fingerprint(wire_of(activity) if wire is None else wire)


def recorded_replies(
    state: TurnState, delivery: Delivery, activity: Activity
) -> list[Activity] | None:
    """The replies of the first processing of `activity` (its `delivery`'s evidence in the
    documents the turn read), or None when it is new;
    `ActivityConflictError` for evidence of other content, `ActivityClaimedError` while another
    delivery's claim holds it."""
    found = state.delivered(delivery.name)
    if not found:  # nearly every turn: a new activity
        return None
    printed, retention = delivery.printed, delivery.retention
    now = time.time()
    claimed = False
    for key, entry in found:
        _check(key, entry)
        if not _live(entry, now, retention):
            continue
        claim = entry.get("claim")
        if (claim["digest"] if claim is not None else entry["digest"]) != printed.digest:
            raise ActivityConflictError(activity.id or "")
        if claim is None:
            return [_restored(reply, activity) for reply in _replies(key, entry, printed)]
        claimed = True
    if claimed:
        raise ActivityClaimedError(activity.id or "")
    return None


async def claim_activity(
    storage: Storage, state: TurnState, delivery: Delivery, activity: Activity, lease: float
) -> None:
    """Write a claim of `activity` living `lease` seconds into the turn's home document
    before the handler runs (a conditional write of the document as read, with the claim
    added), so the turn's save replaces this very claim; `ActivityClaimedError` when another
    delivery claimed or saved the activity first. The claim holds a token of its own, so a turn
    whose lease ended and whose activity was claimed again cannot merge its save into the new
    claim."""
    document = state.evidence_document(home=True)
    if document is None:
        return
    name, retention, now = delivery.name, delivery.retention, time.time()
    claim = {"digest": delivery.printed.digest, "token": uuid.uuid4().hex}
    document.note(name, _adding(name, {"claim": claim, "until": now + lease, "at": now}, retention))
    key = document.key
    assert key is not None
    for _ in range(CLAIM_RETRIES + 1):
        try:
            etags = await storage.write({key: document.evidence_write()})
        except ConflictError:
            newer = (await storage.read([key])).get(key)
            theirs = newer.value.get(DELIVERED) if newer is not None else None
            if isinstance(theirs, dict) and name in theirs:
                _check(key, theirs[name])
                if _live(theirs[name], time.time(), retention):
                    raise ActivityClaimedError(activity.id or "") from None
            document.rebase(newer)
            continue
        document.evidence_saved(etags[key])
        return
    raise ActivityClaimedError(activity.id or "")


def remember(
    state: TurnState,
    delivery: Delivery,
    activity: Activity,
    replies: list[Activity],
    *,
    claimed: bool,
) -> None:
    """Note the evidence of `activity` (of `delivery`) and its `replies`, sealed, in the
    document the turn's save writes it in (a claimed turn's: its home, replacing the claim),
    chosen by the save (`TurnState.note_evidence`)."""
    printed = delivery.printed
    if replies:
        sealed = seal(printed.key, [_kept(reply, activity) for reply in replies])
        entry: dict[str, Any] = {"digest": printed.digest, "sealed": sealed, "at": time.time()}
    else:  # nothing to seal
        entry = {"digest": printed.digest, "replies": [], "at": time.time()}
    name = delivery.name
    state.note_evidence(name, _adding(name, entry, delivery.retention), home=claimed)


_ROUTING = ("channel_id", "from_property", "recipient", "conversation", "reply_to_id")
"""The fields `Activity.reply` fills in from the incoming activity."""


def _kept(reply: Activity, activity: Activity) -> str | dict[str, Any]:
    """A reply as its evidence keeps it: the members of its JSON form that `activity.reply()`
    would not give back (None for one it lacks), or just its text for `activity.reply(text)`,
    so a redelivery (the same activity, by its digest) rebuilds the rest (`_restored`)."""
    if (
        reply.type == "message"
        and reply.text is not None
        and reply.value is None
        and not reply.__pydantic_extra__
        and reply.channel_id == activity.channel_id
        and reply.from_property is activity.recipient
        and reply.recipient is activity.from_property
        and reply.conversation is activity.conversation
        and reply.reply_to_id == activity.id
    ):  # `activity.reply(text)`, as `TurnContext.send(text)` makes it
        return reply.text
    wire = wire_of(reply)
    default = wire_of(activity.reply())
    kept = {name: value for name, value in wire.items() if default.get(name, _NONE) != value}
    kept.update((name, None) for name in default if name not in wire)
    return kept


_NONE = object()


def _restored(kept: str | dict[str, Any], activity: Activity) -> Activity:
    """The reply `_kept` kept (or, from evidence written before replies were kept so, the
    reply's whole JSON form), rebuilt for a redelivery of `activity`."""
    if isinstance(kept, str):
        return activity.reply(kept)
    return Activity.of({**wire_of(activity.reply()), **kept})


def _replies(key: str, entry: dict[str, Any], printed: Fingerprint) -> list[Any]:
    """The replies `entry` (of the activity `printed`, stored at `key`) kept: unsealed, or
    none (nothing was sealed), or as evidence written before replies were sealed kept them."""
    sealed = entry.get("sealed")
    if sealed is None:
        return list(entry["replies"])
    try:
        replies = unseal(printed.key, sealed)
    except ValueError:
        replies = None
    if not (isinstance(replies, list) and all(isinstance(r, (str, dict)) for r in replies)):
        raise FormatError(key, f"holds {DELIVERED} evidence whose replies do not unseal")
    return replies


def _adding(name: str, entry: dict[str, Any], retention: float) -> Merge:
    """Add `entry` as `name` to a document's evidence, dropping what is past `retention` and
    all but the newest `EVIDENCE_LIMIT` entries (entries are written oldest first, so both
    drop from the front, and a turn looks at the few entries it drops and one more)."""

    def merge(delivered: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        delivered.pop(name, None)
        over = len(delivered) - EVIDENCE_LIMIT + 1  # one over, as a rule
        dropped: list[str] = []
        for other, kept in delivered.items():  # written oldest first: drop from the front
            if len(dropped) >= over and _carried(other, kept, now, retention):
                break  # the first live one within the bound ends it
            dropped.append(other)
        for other in dropped:
            del delivered[other]
        delivered[name] = entry
        return delivered

    return merge


def _carried(key: str, entry: Any, now: float, retention: float) -> bool:
    """`_live` for an entry a write carries on, checking what it looks at (every entry is
    checked in full when a delivery looks it up by name)."""
    try:
        return _live(entry, now, retention)
    except (TypeError, KeyError):
        raise FormatError(key, f"holds {DELIVERED} evidence that is not a delivery entry") from None


def _live(entry: dict[str, Any], now: float, retention: float) -> bool:
    """Whether an entry still counts: a claim within its lease, evidence within retention."""
    if "claim" in entry:
        return bool(entry["until"] > now)
    return bool(entry["at"] + retention > now)


def _check(key: str, entry: Any) -> dict[str, Any]:
    """`entry` when it is delivery evidence or a claim; `FormatError` otherwise (never
    rewritten)."""
    if isinstance(entry, dict) and _number(entry.get("at")):
        claim = entry.get("claim")
        if claim is None and isinstance(entry.get("digest"), str):
            if isinstance(entry.get("sealed"), str):
                return entry
            replies = entry.get("replies")
            if isinstance(replies, list) and all(isinstance(r, (str, dict)) for r in replies):
                return entry
        elif isinstance(claim, dict) and isinstance(claim.get("digest"), str):
            if _number(entry.get("until")):
                return entry
    raise FormatError(key, f"holds {DELIVERED} evidence that is not a delivery entry")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
