"""Every storage key the framework writes, built from outside ids by one-to-one escaping.

Each id is one `/`-free segment: everything outside `[A-Za-z0-9-_.:@~]` is percent-encoded
(UTF-8, upper-case hex), and a segment of dots only has its dots encoded, so no id can be
empty, `.`, `..` or reach into another scope's key. Parsing refuses non-canonical escapes,
so a key names exactly one document. `namespaced` puts the optional namespace in front of
every key (the one place that does). The keys and their write groups (`write_group`; `N/` is
the namespace, if any, `C` = `N/{channel}/conversations/{conversation}`, `S` = `C/users/{user}`):

| kind            | key                                        | write group          |
|-----------------|--------------------------------------------|----------------------|
| user            | `N/{channel}/users/{user}`                 | `U`                  |
| conversation    | `C`                                        | `C`                  |
| session         | `C/users/{user}`                           | `C`                  |
|                 | `C/users/{user}/agents/{app_name}`         | `C`                  |
| app             | `N/app/{app_name}`                         | the key itself       |
| history         | `S/history`                                | `C`                  |
| history_page    | `S/history/pages/{n}`                      | `C`                  |
| history_index   | `S/history/ids/{message id}`               | `C`                  |
| run             | `S/runs/{run id}`                          | `C`                  |
| agui_owner      | `C/agui-owner`, `C/agui-owner/{app_name}`  | `C`                  |
| agui_sent       | `S/agui`                                   | `C`                  |
| agui_thread     | `S/agui-thread`                            | `C`                  |
| user_session    | `N/{channel}/users/{user}/sessions/{conv}` | `U`                  |
| user_forgetting | `N/{channel}/users/{user}/forgetting`      | `U`                  |
| agui_threads    | `U/agui-threads`, `U/agui-threads/{app}`   | `U`                  |
| agui_thread_page| `U/agui-thread-pages[/{app}]/{n}`          | `U`                  |

So a turn's conversation, session and every record it writes beside them commit in one write
group (one Redis slot, one Cosmos DB partition), and a user's own records lie in the user's
(`U` = `N/{channel}/users/{user}`; in 0.1.0 each was its own: `state/_regroup.py`). The
evidence of processed activities has no key of its own: it travels inside a bucket the turn
writes (`state/_delivery.py`). The per-user index (`user_session`, one per conversation the
user has a session in) is written in the same all-or-nothing batch as the session bucket,
history head or AG-UI document that starts a session (`session_index_key`), so `forget_user`
finds a user's sessions by listing the user's own keys; `user_forgetting` marks a forget under
way until it is done (see `state/_forget.py`). `U` = `N/{channel}/users/{user}`; `agui_threads`
is the head of a user's AG-UI thread index of one agent (newest first,
`state/agui/_thread_index.py`), `agui_thread_page` its older pages.
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
    """The scope and ids a storage key was built from; for a framework record (`kind` other
    than `"state"`), the scope it lives under and its own id (`record`)."""

    scope: str
    channel: str | None = None
    conversation: str | None = None
    user: str | None = None
    app: str | None = None
    namespace: str | None = None
    kind: str = "state"
    """`"state"` for a scope's bucket, else the record's kind (see the table above)."""
    record: str | None = None
    """The record's own id: page number, message id, run id or app name."""


def namespaced(namespace: str | None, *parts: str) -> str:
    """`parts` joined into a key, under the escaped `namespace` when there is one."""
    if namespace is None:
        return "/".join(parts)
    return "/".join((escape_segment(namespace, what="namespace"), *parts))


def user_key(channel: str, user: str, *, namespace: str | None = None) -> str:
    """`{channel}/users/{user}`: one user's state on one channel."""
    return namespaced(
        namespace,
        escape_segment(channel, what="channel id"),
        "users",
        escape_segment(user, what="user id"),
    )


def conversation_key(channel: str, conversation: str, *, namespace: str | None = None) -> str:
    """`{channel}/conversations/{conversation}`: shared by every member of a conversation."""
    return namespaced(
        namespace,
        escape_segment(channel, what="channel id"),
        "conversations",
        escape_segment(conversation, what="conversation id"),
    )


def session_key(
    channel: str,
    conversation: str,
    user: str,
    *,
    agent: str | None = None,
    namespace: str | None = None,
) -> str:
    """`{channel}/conversations/{conversation}/users/{user}`: one user in one conversation,
    followed by `/agents/{agent}` for the session of one agent (app name)."""
    key = namespaced(
        namespace,
        escape_segment(channel, what="channel id"),
        "conversations",
        escape_segment(conversation, what="conversation id"),
        "users",
        escape_segment(user, what="user id"),
    )
    return key if agent is None else f"{key}/agents/{escape_segment(agent, what='app name')}"


def list_prefix(channel: str, folder: str, *, namespace: str | None = None) -> str:
    """`N/{channel}/{folder}/`: what every key of a channel's users or conversations starts
    with, for listing them."""
    return namespaced(namespace, escape_segment(channel, what="channel id"), folder, "")


def history_key(session: str) -> str:
    """`S/history`: the head of the history of the session whose key is `session`."""
    return f"{session}/history"


def history_page_key(session: str, number: int) -> str:
    """`S/history/pages/{number}`: a full page of that history."""
    return f"{session}/history/pages/{number}"


def history_index_key(session: str, message_id: str) -> str:
    """`S/history/ids/{message id}`: where a message of that history sits."""
    return f"{session}/history/ids/{escape_segment(message_id, what='message id')}"


def run_key(session: str, run_id: str) -> str:
    """`S/runs/{run id}`: the record of a run of the session whose key is `session`."""
    return f"{session}/runs/{escape_segment(run_id, what='run id')}"


def thread_owner_key(conversation: str, agent: str | None = None) -> str:
    """`C/agui-owner` (`C/agui-owner/{agent}` for an agent's thread): which user an AG-UI
    thread (the conversation `conversation`) belongs to."""
    if agent is None:
        return f"{conversation}/agui-owner"
    return f"{conversation}/agui-owner/{escape_segment(agent, what='app name')}"


def thread_sent_key(session: str) -> str:
    """`S/agui`: what the AG-UI server last sent the thread of the session `session`."""
    return f"{session}/agui"


def thread_record_key(session: str) -> str:
    """`S/agui-thread`: an AG-UI thread's title, times and recent runs (the thread service)."""
    return f"{session}/agui-thread"


def session_index_key(key: str) -> tuple[str, str] | None:
    """For a key that starts a session (`S`, `S/history`, `S/agui` or `S/agui-thread`, where
    `S` may be an agent's `.../agents/{app}`): the user's index entry of that session,
    `N/{channel}/users/{user}/sessions/{conversation}` (one for all agents of it), and the
    session's key without an agent, which the entry holds. None for any other key."""
    parts = key.split("/")
    bucket = [parts, parts[:-1] if parts[-1] in ("history", "agui", "agui-thread") else None]
    for session in bucket + [b[:-2] for b in bucket if b and len(b) > 2 and b[-2] == "agents"]:
        if session and len(session) >= 5 and session[-2] == "users":
            if session[-4] == "conversations" and len(session) <= 6:
                *head, channel, _, conversation, _, user = session
                entry = "/".join((*head, channel, "users", user, "sessions", conversation))
                return entry, "/".join(session)
    return None


def session_members(session: str) -> tuple[str, str, str | None]:
    """What belongs to the session whose key is `session` (`S`, or an agent's
    `S/agents/{app}`) besides its bucket: every key under `S/` except the sessions of agents
    (the third value, a prefix to leave out; None for an agent's session), and the AG-UI
    owner record of its thread (`C/agui-owner`, `C/agui-owner/{app}`)."""
    parts = session.split("/")
    if len(parts) >= 7 and parts[-2] == "agents" and parts[-4] == "users":
        owner = "/".join((*parts[:-4], "agui-owner", parts[-1]))
        return f"{session}/", owner, None
    return f"{session}/", "/".join((*parts[:-2], "agui-owner")), f"{session}/agents/"


def thread_index_key(user: str, agent: str | None = None, page: int | None = None) -> str:
    """`U/agui-threads` (`U/agui-threads/{agent}` for an agent's threads) for the user key
    `user`: the head of the user's AG-UI thread index; with `page`,
    `U/agui-thread-pages[/{agent}]/{page}`: one of its older pages."""
    agent_part = () if agent is None else (escape_segment(agent, what="app name"),)
    if page is None:
        return "/".join((user, "agui-threads", *agent_part))
    if type(page) is not int or page < 0:
        raise InvalidKeyError(f"an index page is a number >= 0, got {page!r:.40}")
    return "/".join((user, "agui-thread-pages", *agent_part, str(page)))


def forgetting_key(user: str) -> str:
    """`U/forgetting` for the user key `user`: present while a forget of that user is under way."""
    return f"{user}/forgetting"


def app_key(app_name: str, *, namespace: str | None = None) -> str:
    """`app/{app_name}`: global to the application."""
    return namespaced(namespace, "app", escape_segment(app_name, what="app name"))


def parse_key(key: str, *, namespace: str | None = None) -> ParsedKey:
    """Give back the scope and ids of a key built by this module (a scope's key or a record's
    beside it, see the table above); `InvalidKeyError` for any other key."""
    parts = key.split("/") if isinstance(key, str) else []
    if namespace is not None:
        if not parts or parts[0] != escape_segment(namespace, what="namespace"):
            raise InvalidKeyError(f"key {key!r:.80} is not in namespace {namespace!r}")
        parts = parts[1:]
    if len(parts) == 2 and parts[0] == "app":
        return ParsedKey("app", app=unescape_segment(parts[1]), namespace=namespace)
    for length in (7, 5, 3):  # a session's key or a record beside it, then the other scopes'
        scope = _parse_scope(parts[:length], namespace)
        if scope is not None:
            parsed = _parse_record(scope, parts[length:]) if len(parts) > length else scope
            if parsed is not None:
                return parsed
    raise InvalidKeyError(f"key {key!r:.80} does not follow the agent-state key scheme")


_RECORDS: dict[str, dict[tuple[str, str | bool], str]] = {
    "conversation": {("agui-owner", False): "agui_owner", ("agui-owner", True): "agui_owner"},
    "user": {("sessions", True): "user_session", ("forgetting", False): "user_forgetting",
             ("agui-threads", False): "agui_threads", ("agui-threads", True): "agui_threads"},
    "session": {("history", False): "history", ("history", "pages"): "history_page",
                ("history", "ids"): "history_index", ("runs", True): "run",
                ("agui", False): "agui_sent", ("agui-thread", False): "agui_thread"},
}  # fmt: skip
"""The records beside each scope's key: (literal, what follows) -> kind; True: an id follows."""


def _parse_scope(parts: list[str], namespace: str | None) -> ParsedKey | None:
    """The scope key `parts` spell out, or None (`InvalidKeyError` for a bad escape)."""
    if len(parts) not in (3, 5, 7) or parts[1::2] not in (
        ["users"], ["conversations"], ["conversations", "users"],
        ["conversations", "users", "agents"],
    ):  # fmt: skip
        return None
    ids = [unescape_segment(p) for p in parts[0::2]]
    if len(ids) == 4:
        return ParsedKey("session", channel=ids[0], conversation=ids[1], user=ids[2],
                         app=ids[3], namespace=namespace)  # fmt: skip
    if parts[1] == "users":
        return ParsedKey("user", channel=ids[0], user=ids[1], namespace=namespace)
    if len(ids) == 2:
        return ParsedKey("conversation", channel=ids[0], conversation=ids[1], namespace=namespace)
    return ParsedKey("session", channel=ids[0], conversation=ids[1], user=ids[2],
                     namespace=namespace)  # fmt: skip


def _parse_record(scope: ParsedKey, rest: list[str]) -> ParsedKey | None:
    """The record `rest` names beside `scope`'s key, or None when it names none."""
    known = _RECORDS.get(scope.scope, {})
    if scope.scope == "user" and rest[0] == "agui-thread-pages" and len(rest) in (2, 3):
        number = rest[-1]
        if not (number.isdigit() and str(int(number)) == number):
            return None
        app = unescape_segment(rest[1]) if len(rest) == 3 else None
        return ParsedKey("user", scope.channel, user=scope.user, app=app,
                         namespace=scope.namespace, kind="agui_thread_page",
                         record=number)  # fmt: skip
    if len(rest) == 1:
        kind, record = known.get((rest[0], False)), None
    elif len(rest) == 2:
        kind, record = known.get((rest[0], True)), unescape_segment(rest[1])
    elif len(rest) == 3:
        kind, record = known.get((rest[0], rest[1])), rest[2]
        if kind == "history_page":
            record = record if record.isdigit() and str(int(record)) == record else None
        else:
            record = unescape_segment(record)
        kind = kind if record is not None else None
    else:
        return None
    if kind is None:
        return None
    return ParsedKey(scope.scope, scope.channel, scope.conversation, scope.user, scope.app,
                     namespace=scope.namespace, kind=kind, record=record)  # fmt: skip


_GROUP_HEADS = ("conversations", "users")
"""The segment after which (at position 1, or 2 under a namespace) a key's write group is the
conversation or user it names, `C` or `U`: the conversation rule is tried at both positions
first, so a channel or user literally named `users` still finds its conversation."""


def _group_rule(parts: list[str], whole: bool) -> str | None:
    """The write group the rule gives a key whose segments are `parts` (`whole`), or every key
    whose first segments are `parts` (not `whole`): `C` or `U`, `""` for the key itself, and
    None when the segments after `parts` decide it."""
    for head in _GROUP_HEADS:
        for i in (1, 2):
            if len(parts) <= i:
                if whole:
                    continue  # no such segment: this rule does not apply
                return None
            if parts[i] != head:
                continue
            if len(parts) > i + 2 if whole else len(parts) >= i + 2:
                return "/".join(parts[: i + 2])
            if not whole:
                return None  # the key may end at the next segment (its own group) or go on
    return ""


class _WriteGroups:
    """`write_group(key)`: the write group of a key (see `Storage.write_group`): a
    conversation's key for the conversation and every key under it (its sessions), a user's
    key for the user and every record under it (their index of sessions, their AG-UI thread
    index, a forget's marker), else the key itself.

    Given to every storage `open_storage` opens, so a turn's conversation and session
    buckets can be written atomically together (one Redis slot, one Cosmos DB partition), and
    a user's own records lie in one place. `write_group.prefix_group(prefix)` names the one
    group of every key under `prefix` (None when there is none): Redis lists such a prefix
    from that group's index instead of scanning the keyspace.
    """

    def __call__(self, key: str) -> str:
        return _group_rule(key.split("/"), whole=True) or key

    def prefix_group(self, prefix: str) -> str | None:
        """The write group of every key that starts with `prefix`, or None when they may lie
        in several (the prefix stops before the segments that decide it)."""
        return _group_rule(prefix.split("/")[:-1], whole=False) or None

    def __repr__(self) -> str:
        return "agent_state.write_group"


write_group = _WriteGroups()
