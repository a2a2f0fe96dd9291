"""Where FileStorage keeps a key's file: all in the root folder, or by write group.

Built without a write group rule (or with `whole_key`), a store keeps every document in its
root folder, as agent-state 0.1.0 did. Given a rule (`open_storage` gives the key scheme's),
it keeps each key of a group in the group's folder, `root/<name of group + "/">` (`+` spells
`/`, so no key's file has that name), except the group's own key, which stays in the root.
So a prefix inside one group (the rule's `prefix_group`) is listed from that folder alone.

The root's `.layout` file names the rule a grouped store was laid out by. A client with
another rule, or none, is refused (`StorageConfigError`), so no two clients look for one key
in two places. The first grouped open of a folder without it moves every document that
belongs in a group's folder there (each under its key's lock; a copy already there wins),
then writes it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from .._errors import StorageConfigError
from . import fileio
from .filenames import HASHED_PREFIX, MAX_NAME_BYTES, is_hashed, key_for_name, name_stem

MARKER = ".layout"
"""The root's file naming the write group rule of a grouped store."""


def rule_name(rule: Callable[[str], str]) -> str:
    """How `.layout` names a write group rule: a function by module and name, else its repr."""
    qualified = getattr(rule, "__qualname__", None)
    return f"{rule.__module__}.{qualified}" if qualified else repr(rule)


def folder_name(group: str) -> str:
    """The name of a group's folder: the spelling of `group + "/"`, or for a long group `#`,
    its SHA-256 and `+`. No key's file name ends with `+` (no key ends with `/`)."""
    spelled = name_stem(group + "/")
    if len(spelled) <= MAX_NAME_BYTES:
        return spelled
    return HASHED_PREFIX + hashlib.sha256(group.encode("utf-8")).hexdigest() + "+"


def is_folder_name(name: str) -> bool:
    """Whether a name in the root can be a group's folder."""
    return name.endswith("+")


def check_marker(root: Path, rule: str | None) -> bool:
    """Refuse a store laid out by another rule (or by one, for a client without); True when a
    grouped client finds no marker yet (the folder is flat: `adopt` lays it out)."""
    try:
        marked: str | None = (root / MARKER).read_text().strip()
    except FileNotFoundError:
        marked = None
    if marked == rule or (marked is None and rule is None):
        return False
    if marked is None:
        return True
    hint = "no write_group" if rule is None else f"write_group {rule}"
    raise StorageConfigError(
        f"file storage {root} is laid out by the write groups of {marked}, not {hint}: open"
        " it with that write_group (open_storage gives agent_state.write_group), so that every"
        " client finds each document in one place"
    )


def write_marker(root: Path, rule: str) -> None:
    """Write `.layout` durably: the store is laid out by `rule` from now on."""
    fileio.replace_file(root / MARKER, f"{rule}\n".encode(), tag="layout")
    fileio.fsync_directory(root)


def members_in_root(root: Path, names: list[str], group_of: Callable[[str], str]) -> dict[str, str]:
    """The documents in the root (`name -> key`) that belong in a group's folder."""
    found = {}
    for name in names:
        key = key_for_name(name)
        if key is None and is_hashed(name):
            head = fileio.read_head(root / name)
            key = head.key if head is not None else None
        if key is not None and group_of(key) != key:
            found[name] = key
    return found


def move_in(source: Path, target: Path) -> None:
    """Move a document into its group's folder, durably; a copy already there is kept."""
    if not source.exists():
        return
    make_folder(target.parent)
    if target.exists():
        os.remove(source)
    else:
        os.replace(source, target)
        fileio.fsync_directory(target.parent)
    fileio.fsync_directory(source.parent)


def make_folder(folder: Path) -> None:
    """Create a group's folder if missing, durably (its name in the root synced)."""
    if folder.is_dir():
        return
    try:
        folder.mkdir()
    except FileExistsError:
        return
    fileio.fsync_directory(folder.parent)
