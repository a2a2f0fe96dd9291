"""Master-key signature verification, so a client holding the wrong key gets 401.

The client signs `verb`, resource type, resource link and `x-ms-date` (each on its own
line, then an empty line) with HMAC-SHA256 keyed by the base64-decoded master key, and
sends `type=master&ver=1.0&sig=<base64>` URL-encoded in `Authorization`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import unquote

from ._store import CosmosFault

MASTER_KEY = base64.b64encode(b"agent-state cosmos emulator master key, tests only!!").decode()
"""The emulator's default master key (any base64 string works with `--key`)."""


def resource_of(segments: list[str]) -> tuple[str, str]:
    """The (resource type, resource link) a path is signed with.

    An item path (`dbs/d`, `dbs/d/colls/c/docs/i`) is its own link, typed by its
    second-to-last segment; a feed path (`dbs`, `dbs/d/colls`) is signed with its parent's
    link, typed by its last segment.
    """
    if not segments:
        return "", ""
    if len(segments) % 2 == 0:
        return segments[-2], "/".join(segments)
    return segments[-1], "/".join(segments[:-1])


def signature(key: str, verb: str, resource_type: str, link: str, date: str) -> str:
    text = f"{verb.lower()}\n{resource_type.lower()}\n{link}\n{date.lower()}\n\n"
    digest = hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify(key: str, verb: str, segments: list[str], headers: dict[str, str]) -> None:
    """Raise 401 unless `Authorization` holds a master-key signature of this request."""
    fields = dict(
        part.partition("=")[::2] for part in unquote(headers.get("authorization", "")).split("&")
    )
    resource_type, link = resource_of(segments)
    expected = signature(key, verb, resource_type, link, headers.get("x-ms-date", ""))
    if fields.get("type") != "master" or not hmac.compare_digest(fields.get("sig", ""), expected):
        raise CosmosFault(
            401,
            "Unauthorized",
            "The input authorization token can't serve the request. The wrong key is being"
            " used or the expected payload is not built as per the protocol.",
        )
