"""Exactly once per activity: the record of a processed activity, saved with its turn.

A channel may deliver one activity twice (retries, redelivery after a timeout). A turn that
changed state stores a record of its activity (a digest of the activity and the replies)
in the same write as its buckets, under the activity's conversation, with a TTL: the
retention window. A second delivery within it finds the record in the turn's one read and
gets the first replies back without running the handler again; the same id with other
content is an `ActivityConflictError`. Turns that changed nothing keep no record: running
them again applies nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ._activity import Activity
from ._document import Record
from ._errors import StateError

RETENTION_SECONDS = 24 * 3600.0
"""How long a processed activity is remembered by default."""


class ActivityConflictError(StateError, ValueError):
    """An activity id that was already processed arrived again with other content."""

    def __init__(self, activity_id: str) -> None:
        self.activity_id = activity_id
        super().__init__(
            f"activity {activity_id!r} was already processed with other content; "
            "an id must name one activity"
        )


class DeliveryRecord(Record):
    """The stored record of one processed activity (`TurnState.attach`es it): the digest of
    the activity and its replies. It has no format member (records written before had none)."""

    kind = "delivery"
    format = None
    fields = {"digest": str, "replies": list}
    ttl = RETENTION_SECONDS


def digest(activity: Activity) -> str:
    """A fingerprint of the activity's content, to tell a redelivery from a reused id."""
    wire = activity.model_dump(mode="json", by_alias=True, exclude_none=True)
    return hashlib.sha256(orjson.dumps(wire, option=orjson.OPT_SORT_KEYS)).hexdigest()


def recorded_replies(record: DeliveryRecord, activity: Activity) -> list[Activity] | None:
    """The replies of the first processing of `activity`, or None when it is new."""
    stored = record.stored()
    if stored is None:
        return None
    if stored["digest"] != digest(activity):
        raise ActivityConflictError(activity.id or "")
    return [Activity.of(reply) for reply in stored["replies"]]


def remember(record: DeliveryRecord, activity: Activity, replies: list[Activity]) -> None:
    """Fill the record that the turn's save writes along with its buckets."""
    wire: list[dict[str, Any]] = [
        reply.model_dump(mode="json", by_alias=True, exclude_none=True) for reply in replies
    ]
    record.value.update(digest=digest(activity), replies=wire)
