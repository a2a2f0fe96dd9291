"""Exactly once per activity: the record of a processed activity, saved with its turn.

A channel may deliver one activity twice (retries, redelivery after a timeout). A turn that
changed state stores a record of its activity (a digest of the activity and the replies)
in the same write as its buckets, under the activity's conversation, with a TTL: the
retention window. A second delivery within it finds the record in the turn's one read and
gets the first replies back without running the handler again; the same id with other
content is an `ActivityConflictError`. Turns that changed nothing keep no record: running
them again applies nothing.

A claimed route (`claim=True`, for handlers with outside effects) goes further: before its
handler runs, the turn creates the activity's record as a claim (a create-only write that
lives `lease` seconds), so of the processes that get the activity at once only one runs the
handler; the others raise `ActivityClaimedError`. The turn's save replaces the claim by the
record, conditionally on the claim's version. A claim whose turn never saved (its process
died, its handler raised, its save failed) refuses the activity until the lease ends; then a
delivery runs the route again, so the activity is never lost.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import orjson

from ._activity import Activity
from ._document import Record
from ._errors import StateError
from .backends import ConflictError, Storage, StoreItem

RETENTION_SECONDS = 24 * 3600.0
"""How long a processed activity is remembered by default."""
CLAIM_LEASE_SECONDS = 300.0
"""How long a claim holds an activity whose turn has not saved, by default."""


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


class DeliveryRecord(Record):
    """The stored record of one processed activity (`TurnState.attach`es it): the digest of
    the activity and its replies, or a claimed route's claim (`{"claim": {"digest", "token"}}`)
    until its turn saves. It has no format member (records written before had none)."""

    kind = "delivery"
    format = None
    fields = {"digest": str, "replies": list}
    ttl = RETENTION_SECONDS


def digest(activity: Activity) -> str:
    """A fingerprint of the activity's content, to tell a redelivery from a reused id."""
    wire = activity.model_dump(mode="json", by_alias=True, exclude_none=True)
    return hashlib.sha256(orjson.dumps(wire, option=orjson.OPT_SORT_KEYS)).hexdigest()


def recorded_replies(record: DeliveryRecord, activity: Activity) -> list[Activity] | None:
    """The replies of the first processing of `activity`, or None when it is new;
    `ActivityClaimedError` while another delivery's claim holds it."""
    claim = record.value.get("claim")
    if isinstance(claim, dict) and len(record.value) == 1:
        if claim.get("digest") != digest(activity):
            raise ActivityConflictError(activity.id or "")
        raise ActivityClaimedError(activity.id or "")
    stored = record.stored()
    if stored is None:
        return None
    if stored["digest"] != digest(activity):
        raise ActivityConflictError(activity.id or "")
    return [Activity.of(reply) for reply in stored["replies"]]


async def claim_activity(
    storage: Storage, record: DeliveryRecord, activity: Activity, lease: float
) -> None:
    """Create `record` (found absent by the turn's read) as a claim of `activity` living
    `lease` seconds, and start the record from it, so the turn's save replaces this very
    claim; `ActivityClaimedError` when another delivery created the record first. The claim
    holds a token of its own, so a turn whose lease ended and whose activity was claimed
    again cannot merge its save into the new claim."""
    key = record.key
    assert key is not None
    document = {"claim": {"digest": digest(activity), "token": uuid.uuid4().hex}}
    try:
        etags = await storage.write({key: StoreItem(document, record.etag, ttl=lease)})
    except ConflictError as exc:
        raise ActivityClaimedError(activity.id or "") from exc
    record.load(StoreItem(document, etags[key]))
    record.read_all = True  # the turn read the claim: a save meeting another claim is refused


def remember(record: DeliveryRecord, activity: Activity, replies: list[Activity]) -> None:
    """Fill the record that the turn's save writes along with its buckets."""
    wire: list[dict[str, Any]] = [
        reply.model_dump(mode="json", by_alias=True, exclude_none=True) for reply in replies
    ]
    record.value.pop("claim", None)
    record.value.update(digest=digest(activity), replies=wire)
