"""FileStorage laid out by write group: a prefix inside one group is listed from its folder
alone, a folder written without groups (agent-state 0.1.0) is laid out at its first grouped
open, and a client with another rule is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_state import (
    earlier_write_group,
    session_key,
    user_key,
    write_group,
)
from agent_state.backends import FileStorage, Storage, StorageConfigError, StoreItem

USER = user_key("ch", "ada")
SESSION = session_key("ch", "c1", "ada")
MEMBERS = [
    f"{USER}/sessions/c1",
    f"{USER}/agui-threads",
    f"{SESSION}/history",
    f"{SESSION}/runs/" + "r" * 300,  # a name too long: hashed
]
DOCUMENTS = {USER: {"n": 1}, SESSION: {"n": 2}} | {key: {"k": key} for key in MEMBERS}


async def stored(storage: Storage) -> dict[str, object]:
    keys = [key async for key in storage.list("")]
    return {key: item.value for key, item in (await storage.read(keys)).items()}


async def test_a_folder_written_without_groups_is_laid_out_at_its_first_grouped_open(
    tmp_path: Path,
) -> None:
    flat = FileStorage(tmp_path)  # as 0.1.0 kept every store
    async with flat:
        await flat.write({key: StoreItem(value) for key, value in DOCUMENTS.items()})
        moved = flat.path_for(MEMBERS[0])
        copy = moved.read_bytes()
    assert moved.parent == tmp_path
    grouped = FileStorage(tmp_path, write_group=write_group)
    async with grouped:
        assert await stored(grouped) == DOCUMENTS
        assert grouped.path_for(MEMBERS[0]).read_bytes() == copy  # the same file, moved
        assert grouped.path_for(MEMBERS[0]).parent != tmp_path
        assert grouped.path_for(USER).parent == tmp_path  # a group's own key stays
        assert not moved.exists()
    assert (tmp_path / ".layout").read_text() == "agent_state.write_group\n"
    async with FileStorage(tmp_path, write_group=write_group) as again:
        assert await stored(again) == DOCUMENTS


async def test_a_copy_already_moved_is_kept(tmp_path: Path) -> None:
    """An open that died half way through laying the folder out: the copy in the group's
    folder (written since) wins, the one left in the root goes."""
    entry = MEMBERS[0]
    async with FileStorage(tmp_path, write_group=write_group) as first:
        await first.write({entry: StoreItem({"at": "moved"})})
    target = FileStorage(tmp_path, write_group=write_group).path_for(entry)
    (tmp_path / ".layout").unlink()
    async with FileStorage(tmp_path) as flat:
        await flat.write({entry: StoreItem({"at": "root"})})
    grouped = FileStorage(tmp_path, write_group=write_group)
    async with grouped:
        assert await stored(grouped) == {entry: {"at": "moved"}}
        assert target.exists() and not (tmp_path / target.name).exists()


@pytest.mark.parametrize("other", [None, earlier_write_group], ids=["no rule", "another rule"])
async def test_a_client_with_another_rule_is_refused(tmp_path: Path, other: object) -> None:
    async with FileStorage(tmp_path, write_group=write_group) as grouped:
        await grouped.write({MEMBERS[0]: StoreItem({})})
    with pytest.raises(StorageConfigError, match="agent_state.write_group"):
        FileStorage(tmp_path, write_group=other)  # type: ignore[arg-type]


async def test_a_prefix_inside_one_group_reads_only_that_groups_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grouped = FileStorage(tmp_path, write_group=write_group)
    async with grouped:
        others = {f"{user_key('ch', f'u{i}')}/sessions/c": StoreItem({}) for i in range(50)}
        await grouped.write(others | {key: StoreItem(value) for key, value in DOCUMENTS.items()})
        listed: list[Path] = []
        listdir = os.listdir

        def recording(path: str | os.PathLike[str]) -> list[str]:
            listed.append(Path(path))
            return listdir(path)

        monkeypatch.setattr(os, "listdir", recording)
        keys = [key async for key in grouped.list(f"{USER}/")]
        assert keys == sorted(MEMBERS[:2])
        assert listed == [grouped.path_for(MEMBERS[0]).parent]
        listed.clear()
        assert [key async for key in grouped.list(f"{SESSION}/")] == sorted(MEMBERS[2:])
        assert listed == [grouped.path_for(MEMBERS[2]).parent]
        listed.clear()
        assert len([key async for key in grouped.list("ch/users/")]) == 50 + 1 + 2
        assert tmp_path in listed  # across groups: the root and the folders under it
