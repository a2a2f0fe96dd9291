"""The storage key of every scope, built from outside ids by one-to-one segment escaping.

Each id is one `/`-free segment: everything outside `[A-Za-z0-9-_.:@~]` is percent-encoded
(UTF-8, upper-case hex), and a segment of dots only has its dots encoded, so no id can be
empty, `.`, `..` or reach into another scope's key. Parsing refuses non-canonical escapes,
so a key names exactly one tuple of ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from .backends._errors import InvalidKeyError

_SAFE = "-_.:@~"
_PLAIN = re.compile(r"[A-Za-z0-9\-_.:@~]+")
"""Safe characters only: such an id escapes to itself unless it is all dots."""
_CANONICAL = re.compile(r"(?:[A-Za-z0-9\-_.:@~]|%[0-9A-F]{2})+")


def escape_segment(value: str, *, what: str = "id") -> str:
    """Escape one outside id into a key segment; raises `InvalidKeyError` if it is empty."""
    if type(value) is str and _PLAIN.fullmatch(value) and value.strip("."):
        return value
    if not isinstance(value, str):
        raise InvalidKeyError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidKeyError(f"{what} is missing (empty)")
    try:
        segment = quote(value, safe=_SAFE, encoding="utf-8", errors="strict")
    except UnicodeEncodeError as exc:
        raise InvalidKeyError(f"{what} {value[:80]!r} is not valid Unicode") from exc
    return "%2E" * len(segment) if segment.strip(".") == "" else segment


def unescape_segment(segment: str) -> str:
    """Invert `escape_segment`; raises `InvalidKeyError` for a segment it cannot have made."""
    if not _CANONICAL.fullmatch(segment):
        raise InvalidKeyError(f"key segment {segment[:80]!r} is not a canonical escaped id")
    try:
        value = unquote(segment, encoding="utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidKeyError(f"key segment {segment[:80]!r} is not escaped UTF-8") from exc
    if escape_segment(value) != segment:
        raise InvalidKeyError(f"key segment {segment[:80]!r} is not a canonical escaped id")
    return value


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """The scope and ids a storage key was built from."""

    scope: str
    channel: str | None = None
    conversation: str | None = None
    user: str | None = None
    app: str | None = None
    namespace: str | None = None


def _join(namespace: str | None, *parts: str) -> str:
    head = [escape_segment(namespace, what="namespace")] if namespace is not None else []
    return "/".join([*head, *parts])


def user_key(channel: str, user: str, *, namespace: str | None = None) -> str:
    """`{channel}/users/{user}`: one user's state on one channel."""
    return _join(
        namespace,
        escape_segment(channel, what="channel id"),
        "users",
        escape_segment(user, what="user id"),
    )


def conversation_key(channel: str, conversation: str, *, namespace: str | None = None) -> str:
    """`{channel}/conversations/{conversation}`: shared by every member of a conversation."""
    return _join(
        namespace,
        escape_segment(channel, what="channel id"),
        "conversations",
        escape_segment(conversation, what="conversation id"),
    )


def session_key(channel: str, conversation: str, user: str, *, namespace: str | None = None) -> str:
    """`{channel}/conversations/{conversation}/users/{user}`: one user in one conversation."""
    return _join(
        namespace,
        escape_segment(channel, what="channel id"),
        "conversations",
        escape_segment(conversation, what="conversation id"),
        "users",
        escape_segment(user, what="user id"),
    )


def activity_key(
    channel: str,
    activity_id: str,
    *,
    conversation: str | None = None,
    user: str | None = None,
    namespace: str | None = None,
) -> str:
    """Where a processed activity is recorded: under its conversation (so the record shares
    the conversation's write group), else under its user, else under its channel."""
    if conversation is not None:
        head = conversation_key(channel, conversation, namespace=namespace)
    elif user is not None:
        head = user_key(channel, user, namespace=namespace)
    else:
        head = _join(namespace, escape_segment(channel, what="channel id"))
    return f"{head}/activities/{escape_segment(activity_id, what='activity id')}"


def app_key(app_name: str, *, namespace: str | None = None) -> str:
    """`app/{app_name}`: global to the application."""
    return _join(namespace, "app", escape_segment(app_name, what="app name"))


def parse_key(key: str, *, namespace: str | None = None) -> ParsedKey:
    """Give back the scope and ids of a key built by this module; `InvalidKeyError` otherwise."""
    parts = key.split("/") if isinstance(key, str) else []
    if namespace is not None:
        if not parts or parts[0] != escape_segment(namespace, what="namespace"):
            raise InvalidKeyError(f"key {key!r:.80} is not in namespace {namespace!r}")
        parts = parts[1:]
    if len(parts) == 2 and parts[0] == "app":
        return ParsedKey("app", app=unescape_segment(parts[1]), namespace=namespace)
    literals, ids = parts[1::2], [unescape_segment(p) for p in parts[0::2]]
    if literals == ["users"] and len(ids) == 2:
        return ParsedKey("user", channel=ids[0], user=ids[1], namespace=namespace)
    if literals == ["conversations"] and len(ids) == 2:
        return ParsedKey("conversation", channel=ids[0], conversation=ids[1], namespace=namespace)
    if literals == ["conversations", "users"] and len(ids) == 3:
        return ParsedKey(
            "session", channel=ids[0], conversation=ids[1], user=ids[2], namespace=namespace
        )
    raise InvalidKeyError(f"key {key!r:.80} does not follow the agent-state key scheme")


def write_group(key: str) -> str:
    """The write group of a key (see `Storage.write_group`): a conversation's key for the
    conversation and every key under it (its sessions), else the key itself.

    Given to every storage `open_storage` opens, so a turn's conversation and session
    buckets can be written atomically together (one Redis slot, one Cosmos DB partition).
    """
    parts = key.split("/")
    for i in (1, 2):  # `{channel}/conversations/...`, or the same under a namespace
        if len(parts) > i + 2 and parts[i] == "conversations":
            return "/".join(parts[: i + 2])
    return key
