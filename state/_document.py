"""A stored JSON document of one turn: what the lifecycle loads, saves and rebases.

A `Document` owns the value it was loaded with (storage reads are the caller's own copies).
Before it first hands out anything it records a baseline: the stored JSON bytes when the
storage gives them, else one serialization. Unless it was edited or lent a container (which
may have been edited in place), it is known unchanged without serializing it; otherwise one
serialization and a bytes comparison decide, and those bytes are what gets written. The
RFC 6902 patch against the baseline is only computed when asked for or when rebasing after
a conflict.

Two kinds sit on it: the user's buckets (`AgentState` holds one underneath and records the
paths it reads, for rebasing) and the framework's own `Record`s (history, runs, AG-UI thread
documents), plain JSON objects with one format check.

A stored document may also carry the framework's delivery evidence in the reserved member
`DELIVERED` (see `state/_delivery.py`): taken out when the document is loaded, so the user's
value never shows it, and written back as the last member whenever the document is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol, TypeAlias, TypeVar

import orjson

from ._errors import (
    StateClosedError,
    StateConflictError,
    StateError,
    StatePathError,
    StateValueError,
)
from ._paths import MISSING, get_in
from .backends import FormatError, StoreItem
from .backends._json import DUMP_OPTIONS, JsonRuleError, check_encoded, encode_json
from .jsonpatch import PatchConflictError, apply_patch, make_patch, rebase_patch

DELIVERED = "$delivered"
"""The reserved member of a stored document holding the delivery evidence (a JSON object)."""
_DELIVERED_MEMBER = orjson.dumps(DELIVERED) + b":"

Merge: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]
"""Given the evidence a document holds, the evidence it holds with a turn's entry added."""


class Document:
    """One stored JSON document of a turn: its live value, version (`etag`), baseline bytes,
    the write it needs (`pending_write`), `mark_saved`, `rebase` and `close`.

    What a kind of document is, its class says (each bucket class has its own, see
    `AgentState`): `kind` names it in errors (a bucket's scope, a record's kind), `ttl` is
    how long a saved one lives, `last_writer_wins` lets a save overwrite a newer version.
    `reads` holds the paths the turn read (`read_all`: everything), `exposed` whether
    anything was edited or lent. `expires_at` is when the stored version expires (Unix time,
    None: never or not stored) and `holds` how many seconds from its save the document needs
    its session to live at least (a pending run's lease; see `_retention.py`).
    """

    kind: ClassVar[str] = "document"
    ttl: ClassVar[float | None] = None
    last_writer_wins: ClassVar[bool] = False

    __slots__ = (
        "key", "etag", "closed", "reads", "read_all", "exposed", "expires_at", "holds",
        "delivered", "_loaded", "_stored", "_value", "_base", "_pending", "_note", "_dumped",
    )  # fmt: skip
    key: str | None
    etag: str | None
    expires_at: float | None
    holds: float | None
    reads: set[tuple[str, ...]]
    _loaded: dict[str, Any] | None
    _stored: bytes | None
    _value: Any
    _base: bytes | None
    _pending: bytes | None
    _dumped: bytes | None
    """The bytes `changed_now` serialized, for the `pending_write` that follows it at once."""
    delivered: dict[str, Any] | None
    """The delivery evidence the document carries (its `DELIVERED` member), None: none."""
    _note: tuple[str, Any, Merge] | None
    """The evidence entry this turn adds: its name, the entry found there, how to add it."""

    def __init__(self, key: str | None, item: StoreItem | None) -> None:
        self.key = key
        self.closed = self.read_all = self.exposed = False
        self.reads = set()
        self._value = self._base = self._pending = self.holds = self._dumped = None
        self._note = self.delivered = None
        if item is None:  # `load(item)`, inline: every bucket of every turn starts here
            self._loaded = self._stored = self.etag = self.expires_at = None
        else:
            self._loaded, self._stored, self.etag = item.value, item.data, item.etag
            ttl = item.ttl  # `_expiry`, inline
            self.expires_at = None if ttl is None else time.time() + ttl
            if DELIVERED in item.value:
                self._take_delivered()

    def _take_delivered(self) -> None:
        """Move the loaded value's evidence to `delivered` (its stored bytes include the
        evidence, so the baseline is serialized from the value instead)."""
        loaded = self._loaded
        assert loaded is not None
        delivered = loaded.pop(DELIVERED)
        if not isinstance(delivered, dict):
            raise FormatError(self.key or "", f"member {DELIVERED!r} is not an object")
        self.delivered, self._stored = delivered, None

    def load(self, item: StoreItem | None) -> None:
        """Start over from a stored version (None: not stored yet), dropping unsaved edits.

        The document takes ownership of `item.value`: it is the live value from now on.
        """
        self._loaded = item.value if item is not None else None
        self._stored = item.data if item is not None else None
        self.etag = item.etag if item is not None else None
        self.expires_at = _expiry(item) if item is not None else None
        self._value = self._base = self._pending = self._note = self.delivered = None
        self._dumped = None
        self.reads = set()
        self.read_all = self.exposed = False
        if item is not None and DELIVERED in item.value:
            self._take_delivered()

    def root(self) -> Any:
        """The live value, its baseline recorded first: everything handed out comes from here,
        so no edit can happen before the baseline exists, and none after `close`."""
        if self.closed:
            raise StateClosedError(self.kind)
        if self._value is None:  # untyped: the loaded dict is the live value
            loaded, stored = self._loaded, self._stored
            self._value = value = loaded if loaded is not None else {}
            self._base = stored if stored is not None else self.dump(value)
            self._loaded = self._stored = None
        return self._value

    def edited(self) -> Any:
        """`root()` for an edit: the document may differ from its baseline from now on."""
        root = self.root()
        self.exposed = True
        return root

    def replace(self, value: Any) -> None:
        """Make `value` (checked by the caller) the live value."""
        self.edited()
        self._value = value

    def close(self) -> None:
        """End the document's turn: every later use raises `StateClosedError`."""
        self.closed = True

    def was_read(self) -> bool:
        """Whether the turn read anything of it (a save then checks it is still unchanged)."""
        return self.read_all or bool(self.reads)

    @property
    def changed(self) -> bool:
        """Whether the document's value differs from what was loaded (or last saved)."""
        if self._base is None or not self.exposed:
            return False
        return self.dump(self.document()) != self._base

    def changed_now(self) -> bool:
        """`changed`, asked by the save's own code just before the save (nothing can edit the
        document in between): the bytes serialized are kept for its `pending_write`, so a
        changed document is serialized once per save."""
        if self._base is None or not self.exposed:
            return False
        self._dumped = dumped = self.dump(self.document())
        return dumped != self._base

    def note(self, name: str, merge: Merge) -> None:
        """Add an evidence entry (`merge` adds it, and drops what the bounds drop) to be
        written with the document; the entry found under `name` now must still be there when
        the write lands (a rebase onto a version whose entry differs is a conflict)."""
        found = self.delivered or {}
        if self._note is None or self._note[0] != name:
            self._note = (name, found.get(name), merge)
        else:
            self._note = (name, self._note[1], merge)
        self.delivered = merge(dict(found))

    def evidence_write(self) -> StoreItem:
        """A write of the document as it was read (none of the turn's edits) with its
        evidence now: a claim, written before the handler runs (`evidence_saved` after)."""
        self.root()
        assert self._base is not None
        return self._item(orjson.loads(self._base), self._base)

    def evidence_saved(self, etag: str) -> None:
        """Record that `evidence_write()` was stored as `etag`: the turn's edits stay pending
        and the entry noted is now the one found (the save replaces it)."""
        self.etag = etag
        if self._note is not None:
            name, _, merge = self._note
            self._note = (name, (self.delivered or {}).get(name), merge)

    def changes(self) -> list[dict[str, Any]]:
        """The change since load (or the last save) as an RFC 6902 patch; [] when unchanged."""
        if self._base is None:
            return []
        self.read_all = True
        return make_patch(orjson.loads(self._base), self.document())

    def document(self) -> dict[str, Any]:
        """The JSON document as it would be stored now (the live value itself when it is one)."""
        document: dict[str, Any] = self._value
        return document

    def pending_write(self) -> StoreItem | None:
        """The write this document needs (value, its bytes, precondition), or None when unchanged.

        Its value is the live document: hand it to `Storage.write` and do not edit it until the
        write returns. Raises `StateValueError` / `StateValidationError` for a document that
        cannot be stored, before anything is written.
        """
        if self._note is None:
            if self._base is None or not self.exposed:
                return None
        elif self._base is None:
            self.root()
        document, dumped, self._dumped = self.document(), self._dumped, None
        if dumped is None:
            dumped = self.dump(document)
        if dumped == self._base and self._note is None:
            return None
        if dumped != self._base:
            self._check(document, dumped)
        self._pending = dumped
        return self._item(document, dumped)

    def evidence_only(self) -> bool:
        """Whether the last `pending_write()` changes the delivery evidence alone."""
        return self._pending is not None and self._pending == self._base

    def _item(self, document: dict[str, Any], dumped: bytes) -> StoreItem:
        """The write of `document` (whose bytes are `dumped`) with the evidence the document
        carries as its last member; `StateValueError` when the value uses that member."""
        delivered = self.delivered
        if DELIVERED in document:
            raise StateValueError(
                f"state for key {self.key!r} uses the member {DELIVERED!r}, reserved for "
                "the framework's delivery evidence"
            )
        if not delivered:
            return StoreItem(document, self.etag, dumped, ttl=self.ttl)
        tail = _DELIVERED_MEMBER + orjson.dumps(delivered) + b"}"
        data = dumped[:-1] + (b"," + tail if len(dumped) > 2 else tail)
        return StoreItem({**document, DELIVERED: delivered}, self.etag, data, ttl=self.ttl)

    def kept_write(self) -> StoreItem:
        """The write storing the document as it stands, conditional on its version: a save
        adds it to give an unchanged document another TTL (`_retention.py`)."""
        self.root()
        self._pending = self._base
        return StoreItem(self.document(), self.etag, self._pending)

    def upgrade_write(self) -> StoreItem | None:
        """The write storing an unchanged document read at an older schema version, migrated;
        None for every other document. A save adds it to a write it makes anyway, never one of
        its own (`save_documents`)."""
        return None

    def mark_saved(self, etag: str) -> None:
        """Record that the last `pending_write()` (or `upgrade_write()`) was stored as `etag`."""
        if self._pending is None:
            raise StateError("mark_saved() needs a pending_write() first")
        self._base, self.etag, self._pending, self._note = self._pending, etag, None, None

    def rebase(self, newer: StoreItem | None) -> None:
        """Replay this document's changes onto a newer stored version, after a write conflict.

        Allowed only when that gives what running this turn after the other writer would:
        the newer version changed nothing this turn read (`reads`, or everything when
        `read_all`) or wrote. Else `StateConflictError` names the paths and the document is
        left as it was. A blind write the newer version already made is dropped. A stored
        document deleted since (`newer` None) is a conflict too, never recreated.
        """
        note = self._note
        if self._base is None:
            self.load(newer)
            self._renote(note, self.delivered)
            return
        if self.last_writer_wins:  # keep this document, written over the newer version
            theirs = newer.value.get(DELIVERED) if newer is not None else None
            self._renote(note, theirs if isinstance(theirs, dict) else None)
            self.etag = newer.etag if newer is not None else None
            self.expires_at = _expiry(newer) if newer is not None else None
            return
        if newer is None and self.etag is not None:
            raise self._conflict(message=f"{self.kind} state was deleted")
        base = orjson.loads(self._base)
        fresh = self._like(newer)
        self._renote(note, fresh.delivered)
        fresh.root()
        theirs = fresh.document()
        reads = None if self.read_all else self.reads
        patch, clashes = rebase_patch(
            base, make_patch(base, self.document()), make_patch(base, theirs), reads=reads
        )
        if clashes:
            raise self._conflict(paths=clashes)
        try:
            merged = apply_patch(theirs, patch)
        except PatchConflictError as exc:
            raise self._conflict(message=f"cannot rebase: {exc}") from exc
        self._adopt(merged)
        self._loaded = self._stored = self._pending = self._dumped = None
        self.etag, self._base, self.expires_at = fresh.etag, fresh._base, fresh.expires_at

    def _renote(self, note: tuple[str, Any, Merge] | None, theirs: dict[str, Any] | None) -> None:
        """Take a newer version's evidence, with this turn's entry (`note`) added again; a
        conflict when the newer version's entry under that name is not the one this turn found
        (another delivery of the activity saved or claimed it meanwhile)."""
        if note is None:
            self.delivered = theirs
            return
        name, found, merge = note
        theirs = theirs or {}
        if theirs.get(name) != found:
            raise self._conflict(message=f"activity {name!r} was saved by another delivery")
        self.delivered, self._note = merge(dict(theirs)), note

    def dump(self, document: dict[str, Any]) -> bytes:
        """`document` as the JSON bytes stored; `StateValueError` naming what is not JSON."""
        try:
            return orjson.dumps(document, option=DUMP_OPTIONS)
        except TypeError:
            try:
                encode_json(document)  # names the place and the reason
            except JsonRuleError as exc:
                raise StateValueError(f"state for key {self.key!r} is not JSON: {exc}") from None
            raise

    def _adopt(self, merged: dict[str, Any]) -> None:
        """Make a rebased document the live value."""
        self._value = merged

    def _like(self, item: StoreItem | None) -> Document:
        """A document of the same kind loaded from `item` (what another writer stored)."""
        return type(self)(self.key, item)

    def _check(self, document: dict[str, Any], dumped: bytes) -> None:
        """Check what in-place edits may have changed before it is written: a NaN or tuple
        must not go out as null or a list. Assigned values were checked when set; in place,
        only a container that was handed out (found again by the read path that handed it
        out) can have been edited, or anything when the whole document was (`read_all`)."""
        try:
            if self.read_all:
                check_encoded(document, dumped)
                return
            for parts in self.reads:
                if isinstance(value := _lent_value(document, parts), (dict, list)):
                    encode_json(value)
        except JsonRuleError as exc:
            raise StateValueError(f"state for key {self.key!r} is not JSON: {exc}") from None

    def _conflict(
        self, *, paths: Iterable[str] = (), message: str | None = None
    ) -> StateConflictError:
        return StateConflictError(
            [self.key or ""], scopes=[self.kind], paths=paths, message=message, retryable=False
        )


def _expiry(item: StoreItem) -> float | None:
    """When a stored version read just now expires (Unix time), from its remaining TTL."""
    return None if item.ttl is None else time.time() + item.ttl


def _lent_value(document: dict[str, Any], parts: tuple[str, ...]) -> Any:
    """What a read path leads to now (MISSING when it no longer leads anywhere)."""
    try:
        return get_in(document, parts)
    except StatePathError:
        return MISSING


Field: TypeAlias = type | tuple[type, ...]


class Record(Document):
    """A framework document beside the user's buckets (no scope): a JSON object whose members
    the framework reads and writes through `value`; any use of it counts as reading all of it.

    Each kind of record declares its `kind`, its `format` (the `"format"` member every stored
    record holds; None: the kind has none), the members every stored one has and their types
    (`fields`) and the values some may take (`choices`); `stored()` checks them.
    """

    __slots__ = ()
    format: ClassVar[int | None] = 1
    fields: ClassVar[Mapping[str, Field]] = {}
    choices: ClassVar[Mapping[str, frozenset[Any]]] = {}

    @property
    def value(self) -> dict[str, Any]:
        """The live JSON object (empty when there is no record yet); edits to it are saved."""
        value: dict[str, Any] = self.edited()
        self.read_all = True
        return value

    def stored(self) -> dict[str, Any] | None:
        """The record's value, None when there is none yet; `FormatError` for a stored
        document that is not a record of this kind and format, never rewritten."""
        value = self.value
        if not value:
            return None
        reason = _misfit(type(self), value)
        if reason is not None:
            raise FormatError(self.key or "", reason)
        return value


def _misfit(kind: type[Record], value: dict[str, Any]) -> str | None:
    """Why `value` is not a stored record of `kind` (what `FormatError` says after the key),
    or None when it is one."""
    if kind.format is not None and value.get("format") != kind.format:
        return (f"has {kind.kind} format {value.get('format')!r:.40}; this reader knows format "
                f"{kind.format} only")  # fmt: skip
    for name, types in kind.fields.items():
        member = value.get(name, MISSING)
        if not isinstance(member, types) or (isinstance(member, bool) and bool is not types):
            return (f"is not a {kind.kind} record: member {name!r} is {type(member).__name__}, "
                    f"expected {_names(types)}")  # fmt: skip
    for name, allowed in kind.choices.items():
        if value.get(name) not in allowed:
            return (f"is not a {kind.kind} record: member {name!r} is {value.get(name)!r:.40}, "
                    f"expected one of {sorted(allowed)}")  # fmt: skip
    return None


def _names(types: Field) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


R = TypeVar("R", bound=Record)


class Records(Protocol):
    """Where a turn's records come from (`TurnState`): read with the turn, saved with it."""

    def attach(self, cls: type[R], key: str) -> R:
        """The record at `key`, from the turn's reads (empty when not stored)."""

    async def fetch(self, records: Mapping[str, type[R]], along: Iterable[str] = ()) -> list[R]:
        """The records at these keys, those not yet loaded read in one more read (with the
        keys `along`, loaded for a later fetch)."""
