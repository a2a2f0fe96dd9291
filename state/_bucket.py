"""`AgentState`: one scope's document for one turn, dict-like, tracking what changed since load.

Copy on access: the loaded document may be shared with the storage (`read_shared`) and is
never mutated. The bucket's root is a shallow copy of it, and a member that is a dict or list
is deep-copied the first time it is handed out or edited through, so a turn only copies what
it touches. (A typed bucket copies the whole document before validating it.)

Change tracking is lazy: the baseline, the orjson bytes of what the bucket started from, is
recorded just before the first edit or hand-out of a container. It is the stored data when
the storage gives it (`SharedItem.data`), else one serialization. An untouched bucket costs
nothing at save; a touched one one serialization and a bytes comparison, and those bytes are
what gets written. The RFC 6902 patch against the start is only computed when asked for
(`changes()`) or when rebasing after a conflict.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ValidationError

from . import _typed as typed
from ._errors import ScopeError, StateConflictError, StateError, StateValueError
from ._ids import TurnIds
from ._keys import escape_segment
from ._paths import MISSING, check_json, child, drop, get_in, members, put, rebase_patch
from .backends._base import EncodedItem, SharedItem, Storage, StoreItem
from .backends._errors import ConflictError
from .jsonpatch import PatchConflictError, apply_patch, make_patch

_DUMP_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_CONTAINERS = (dict, list)


class _Slotted(ABCMeta):
    """Gives every bucket class `__slots__`, so `bucket.name = x` fails instead of being lost."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kw: Any):
        namespace.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, namespace, **kw)


class AgentState(MutableMapping[str, Any], metaclass=_Slotted):
    """Base of every bucket: a dict of JSON values, or a pydantic model when `model` is set.

    Subclasses set `scope` (the name used by `TurnState` and in `"scope:key"` prefixes) and,
    when persisted, override `key_for`. A typed bucket (`model = MyModel`) exposes the model
    as `data`; its dict interface reads and sets the model's fields, and in-place edits to
    the model are saved. `schema_version` and `migration()` upgrade older stored documents.
    """

    scope: ClassVar[str]
    persisted: ClassVar[bool] = True
    model: ClassVar[type[BaseModel] | None] = None
    schema_version: ClassVar[int | None] = None
    _migrations: ClassVar[dict[int, typed.Migration]] = {}

    __slots__ = ("_key", "_etag", "_source", "_stored", "_value", "_base", "_pending")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "scope" in cls.__dict__ and not _is_scope_name(cls.scope):
            raise ScopeError(f"{cls.__name__}.scope {cls.scope!r} must be a lower-case identifier")
        if cls.model is not None and not (
            isinstance(cls.model, type) and issubclass(cls.model, BaseModel)
        ):
            raise TypeError(f"{cls.__name__}.model must be a pydantic BaseModel subclass")
        version = cls.schema_version
        if version is not None and (cls.model is None or type(version) is not int or version < 1):
            raise TypeError(f"{cls.__name__}.schema_version needs a model and an int >= 1")
        cls._migrations = dict(cls._migrations)

    def __init__(self, key: str | None = None, item: StoreItem | None = None) -> None:
        self._key = key
        self.load(item)

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        """The storage key of this scope for `ids`; `MissingIdError` names any missing id.

        It must depend on `ids` alone: applications cache the keys of recently seen ids.
        """
        raise ScopeError(f"scope {getattr(cls, 'scope', cls.__name__)!r} has no storage key")

    @classmethod
    def migration(cls, from_version: int) -> Callable[[typed.Migration], typed.Migration]:
        """Register a function upgrading a stored document from `from_version` to the next."""
        target = cls.schema_version
        if target is None or type(from_version) is not int or not 1 <= from_version < target:
            raise ValueError(
                f"{cls.__name__} migrations go from a version in 1..{(target or 1) - 1}"
            )
        if from_version in cls.__dict__["_migrations"]:
            raise ValueError(f"{cls.__name__} already has a migration from {from_version}")

        def register(fn: typed.Migration) -> typed.Migration:
            cls._migrations[from_version] = fn
            return fn

        return register

    @property
    def key(self) -> str | None:
        """The storage key, or None for a bucket that is never stored."""
        return self._key

    @property
    def etag(self) -> str | None:
        """The stored version this bucket starts from; None when it was not stored yet."""
        return self._etag

    @property
    def data(self) -> Any:
        """The live document: the model instance of a typed bucket, else a dict of JSON values."""
        root = self._touch()
        if self._source is not None:
            for name in list(root):
                self._member(name)
        return root

    @data.setter
    def data(self, value: Any) -> None:
        self._touch()
        if self.model is not None:
            if not isinstance(value, self.model):
                raise StateValueError(f"{type(self).__name__}.data must be a {self.model.__name__}")
        elif isinstance(value, dict):
            check_json(value)
        else:
            raise StateValueError(f"{type(self).__name__}.data must be a dict")
        self._value, self._source = value, None

    def __getitem__(self, key: str) -> Any:
        value = self._member(key)
        if value is MISSING:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` when absent (falsy stored values are returned)."""
        value = self._member(key)
        return default if value is MISSING else value

    def __setitem__(self, key: str, value: Any) -> None:
        try:
            put(self._touch(), key, value)
        except ValidationError as exc:
            raise typed.validation_error(self._key, exc) from exc

    def set(self, key: str, value: Any) -> None:
        """Set `key` to a JSON value (a model field's value in a typed bucket)."""
        self[key] = value

    def __delitem__(self, key: str) -> None:
        if not drop(self._touch(), key):
            raise KeyError(key)

    def delete(self, key: str) -> None:
        """Remove `key` if present (no error when it is absent)."""
        drop(self._touch(), key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and child(self._root(), key) is not MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(members(self._root()))

    def __len__(self) -> int:
        return len(members(self._root()))

    def clear(self) -> None:
        """Empty the bucket; a typed bucket goes back to its model's defaults."""
        root = self._touch()
        if isinstance(root, BaseModel):
            self._value = typed.decode(type(self), self._key, None)
        else:
            root.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self._key!r}, etag={self._etag!r})"

    @property
    def changed(self) -> bool:
        """Whether the document differs from what was loaded (or last saved), nested edits too."""
        return self._base is not None and self._dump(self._document()) != self._base

    def changes(self) -> list[dict[str, Any]]:
        """The change since load (or the last save) as an RFC 6902 patch; [] when unchanged."""
        if self._base is None:
            return []
        return make_patch(orjson.loads(self._base), self._document())

    def document(self) -> dict[str, Any]:
        """A fresh copy of the document as it would be stored now."""
        self._root()
        return self._copy(self._document())

    def load(self, item: StoreItem | None) -> None:
        """Start over from a stored version (None: not stored yet), dropping unsaved edits.

        The item's value is never mutated, so it may be shared (as `read_shared` gives it).
        """
        self._source = item.value if item is not None else None
        self._stored = item.data if isinstance(item, SharedItem) else None
        self._etag = item.etag if item is not None else None
        self._value = self._base = self._pending = None

    def pending_write(self) -> StoreItem | None:
        """The write this bucket needs (document and precondition), or None when unchanged.

        Its value is the live document, which may share unchanged members with the storage:
        hand it to `Storage.write`, never edit it. Raises `StateValueError` /
        `StateValidationError` for a document that cannot be stored, before anything is written.
        """
        if self._base is None:
            return None
        document = self._document()
        dumped = self._dump(document)
        if dumped == self._base:
            return None
        if self.model is not None:
            typed.check(type(self), self._key, document)
        self._pending = dumped
        return EncodedItem(document, self._etag, data=dumped)

    def mark_saved(self, etag: str) -> None:
        """Record that the last `pending_write()` was stored as version `etag`."""
        if self._pending is None:
            raise StateError("mark_saved() needs a pending_write() first")
        self._base, self._etag, self._pending = self._pending, etag, None

    def rebase(self, newer: StoreItem | None, *, strict: bool = False) -> None:
        """Replay this bucket's changes onto a newer stored version, after a write conflict.

        Raises `StateConflictError` naming the paths when the newer version changed what
        these changes touch (a list counts as one value), leaving the bucket as it was. A
        change the newer version already made is dropped, unless `strict` (then it clashes).
        A stored document deleted since (`newer` None) is a conflict too, never recreated.
        """
        if self._base is None:
            self.load(newer)
            return
        if newer is None and self._etag is not None:
            raise StateConflictError(
                [self._key or ""], scopes=[self.scope], message=f"{self.scope} state was deleted"
            )
        base = orjson.loads(self._base)
        fresh = type(self)(self._key, newer)
        fresh._touch()
        theirs = fresh._document()
        patch, clashes = rebase_patch(
            base, make_patch(base, self._document()), make_patch(base, theirs), strict=strict
        )
        if clashes:
            raise StateConflictError([self._key or ""], scopes=[self.scope], paths=clashes)
        try:
            merged = apply_patch(theirs, patch)
        except PatchConflictError as exc:
            raise StateConflictError(
                [self._key or ""], scopes=[self.scope], message=f"cannot rebase: {exc}"
            ) from exc
        # `merged` shares members with `newer`'s value; a full copy keeps that one untouched.
        if self.model is None:
            self._value = self._copy(merged)
        else:
            self._value = typed.decode(type(self), self._key, merged)
        self._source = self._stored = self._pending = None
        self._etag, self._base = fresh._etag, fresh._base

    def _get_in(self, parts: tuple[str, ...]) -> Any:
        """The value at a path of `TurnState`, or `MISSING`; its first member is made our own."""
        value = self._member(parts[0])
        return value if len(parts) == 1 else get_in(self._root(), parts)

    def _edit_root(self, parts: tuple[str, ...]) -> Any:
        """The live root for a path edit of `TurnState`: touched, and the path's first member
        made our own when the edit goes inside it."""
        root = self._touch()
        if len(parts) > 1:
            self._member(parts[0])
        return root

    def _member(self, name: str) -> Any:
        """The root's member `name` (or `MISSING`); a container is first made the bucket's own."""
        root = self._root()
        value = child(root, name)
        if isinstance(value, _CONTAINERS):
            self._touch()
            source = self._source
            if source is not None and value is source.get(name, MISSING):
                value = root[name] = self._copy(value)
        return value

    def _touch(self) -> Any:
        """The live root, about to be edited or to hand out a container: records the baseline."""
        root = self._root()
        if self._base is None:
            self._base = self._stored if self._stored is not None else self._dump(root)
        return root

    def _root(self) -> Any:
        """The live document: a shallow copy of the loaded one, or a typed bucket's model.

        A typed bucket validates a private copy and records its baseline right away, since its
        model hands out nested values without the bucket seeing it.
        """
        if self._value is None:
            source = self._source
            if self.model is None:
                self._value = dict(source) if source is not None else {}
            else:
                raw = None
                if source is not None:
                    stored = self._stored
                    raw = orjson.loads(stored) if stored is not None else self._copy(source)
                self._value = typed.decode(type(self), self._key, raw)
                self._base = self._dump(self._document())
                self._source = self._stored = None
        return self._value

    def _document(self) -> dict[str, Any]:
        return self._value if self.model is None else typed.encode(type(self), self._value)

    def _copy(self, value: Any) -> Any:
        """A deep copy of JSON `value` that shares nothing with it."""
        return orjson.loads(self._dump(value))

    def _dump(self, document: dict[str, Any]) -> bytes:
        try:
            return orjson.dumps(document, option=_DUMP_OPTIONS)
        except TypeError as exc:
            raise StateValueError(f"state for key {self._key!r} is not JSON: {exc}") from exc


def scope_key(cls: type[AgentState], ids: TurnIds) -> str:
    """`cls.key_for(ids)`; `ScopeError` when `ids` has a namespace and the key lies outside it."""
    key = cls.key_for(ids)
    namespace = ids.namespace
    if namespace is not None and not key.startswith(
        f"{escape_segment(namespace, what='namespace')}/"
    ):
        raise ScopeError(
            f"{cls.__name__}.key_for() gave {key!r}, outside the namespace {namespace!r}: "
            f"a key must start with escape_segment(ids.namespace) + '/'"
        )
    return key


async def load_buckets(storage: Storage, buckets: Iterable[AgentState]) -> None:
    """Load every bucket with one batched read (none when there is no bucket).

    The read is `read_shared`: buckets never mutate what they load, so nothing is copied
    until a turn touches it.
    """
    by_key = {bucket.key: bucket for bucket in buckets}
    found = await storage.read_shared(list(by_key)) if by_key else {}
    for key, bucket in by_key.items():
        bucket.load(found.get(key))  # type: ignore[arg-type]


async def save_buckets(storage: Storage, buckets: Iterable[AgentState]) -> None:
    """Write the changed buckets in one conditional batch; none when nothing changed.

    A failed precondition raises `StateConflictError` naming the scopes; buckets of the batch
    that were written anyway are marked saved, the others keep their changes for a retry.
    """
    pending: dict[str, tuple[AgentState, StoreItem]] = {}
    for bucket in buckets:
        item = bucket.pending_write()
        if item is not None:
            pending[bucket.key] = (bucket, item)  # type: ignore[index]
    if not pending:
        return
    try:
        etags = await storage.write({key: item for key, (_, item) in pending.items()})
    except ConflictError as exc:
        for key, etag in exc.written.items():
            pending[key][0].mark_saved(etag)
        scopes = [pending[key][0].scope for key in exc.keys]
        raise StateConflictError(exc.keys, exc.written, scopes=scopes) from exc
    for key, etag in etags.items():
        pending[key][0].mark_saved(etag)


async def save_merging(
    storage: Storage, buckets: list[AgentState], *, retries: int, strict: bool
) -> None:
    """`save_buckets`, and on a conflict re-read the conflicting buckets, rebase, write again.

    At most `retries` merges; `strict` also refuses a change both writers made (two turns
    that each add 1 agree on the result but must not count once). `StateConflictError`
    names the scopes and paths, and in `written` every bucket stored along the way.
    """
    check_retries(retries)
    written: dict[str, str] = {}
    for attempt in range(retries + 1):
        try:
            await save_buckets(storage, buckets)
            return
        except StateConflictError as exc:
            written.update(exc.written)
            failed = exc
        if attempt < retries:
            await _rebase(storage, buckets, failed.keys, written, strict)
    raise StateConflictError(
        failed.keys,
        written,
        scopes=failed.scopes,
        message=f"gave up after {retries + 1} conflicting writes of "
        f"{', '.join(map(repr, failed.scopes))} state",
    ) from failed


def check_retries(retries: object) -> None:
    """Refuse a retry count that is not an int >= 0 (before anything is read or written)."""
    if type(retries) is not int or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")


async def _rebase(
    storage: Storage,
    buckets: list[AgentState],
    keys: list[str],
    written: dict[str, str],
    strict: bool,
) -> None:
    """Replay the changes of the buckets of `keys` onto their stored versions, read anew."""
    found = await storage.read(keys)
    by_key = {bucket.key: bucket for bucket in buckets}
    for key in keys:
        bucket = by_key[key]
        try:
            bucket.rebase(found.get(key), strict=strict)  # type: ignore[arg-type]
        except StateConflictError as exc:  # the same error, naming what was written
            raise StateConflictError(
                [key], written, scopes=[bucket.scope], paths=exc.paths, message=exc.reason
            ) from exc


def _is_scope_name(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and name.islower() and name[0] != "_"
