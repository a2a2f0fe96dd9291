"""Delivery evidence that names no one: replies sealed with the activity they answer.

An activity's evidence may travel in a bucket many users share (a conversation's, the app's),
which a forget of one user keeps. So an entry holds no sender, and its replies (which may
echo what the user wrote) are sealed under a key drawn from the activity's own JSON form,
which is never stored: a redelivery of that very activity opens them; once the user's own
documents are gone, nothing in the store does. The digest that tells a redelivery from a
reused id and the key come from the same bytes by two unrelated hashes (SHA-256 and a
personalised BLAKE2b), so one does not give the other. Sealing is an XOR with SHAKE-256's
output for the key and a nonce no other seal of this process uses (a counter from a random
start: a key is the activity's, so a nonce need only differ between seals of one activity),
kept as base64 text (stdlib `hashlib`, `base64`).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

_PERSON = b"agent-state/seal"
"""Personalises the key's hash, so it is unrelated to the stored SHA-256 of the same bytes."""
_NONCE = 16
"""Bytes of nonce before each sealed text: no two seals share a keystream."""
_nonces = itertools.count(int.from_bytes(os.urandom(_NONCE), "little") >> 1)


class Fingerprint(NamedTuple):
    """What a turn with an activity id knows of its activity's content."""

    digest: str
    """SHA-256 (hex) of the activity's JSON form: stored, tells a redelivery from a reused id."""
    key: bytes
    """A key from the same bytes, never stored: seals the replies its evidence keeps."""


def fingerprint(wire: Mapping[str, Any]) -> Fingerprint:
    """The `Fingerprint` of an activity's JSON form `wire` (`wire_of`)."""
    data = orjson.dumps(wire, option=orjson.OPT_SORT_KEYS)
    key = hashlib.blake2b(data, digest_size=32, person=_PERSON).digest()
    return Fingerprint(hashlib.sha256(data).hexdigest(), key)


def seal(key: bytes, value: Any) -> str:
    """`value` as JSON, sealed under `key` (text only `unseal` with that key reads)."""
    nonce = next(_nonces).to_bytes(_NONCE, "little")
    return base64.b64encode(nonce + _xor(orjson.dumps(value), nonce + key)).decode()


def unseal(key: bytes, sealed: str) -> Any:
    """What `seal(key, value)` sealed; `ValueError` when `sealed` is not such text (another
    key gives bytes that are not JSON, as a rule)."""
    raw = base64.b64decode(sealed, validate=True)
    nonce, body = raw[:_NONCE], raw[_NONCE:]
    return orjson.loads(_xor(body, nonce + key))


def _xor(data: bytes, secret: bytes) -> bytes:
    """`data` XOR SHAKE-256(`secret`)'s first len(data) bytes."""
    stream = hashlib.shake_256(secret).digest(len(data))
    mixed = int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")
    return mixed.to_bytes(len(data), "little")
