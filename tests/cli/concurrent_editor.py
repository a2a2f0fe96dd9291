"""An $EDITOR for the tests: `python concurrent_editor.py FILE`.

It edits FILE's JSON (sets `"edited": true`); with $CHANGE_MEANWHILE set to a key, it first
changes that key in the store ($AGENT_STATE_URL) through the storage API, as another writer
working at the same time would."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agent_state import open_storage
from agent_state.backends import ANY, StoreItem


async def change_meanwhile(url: str, key: str) -> None:
    async with open_storage(url) as storage:
        await storage.write({key: StoreItem({"changed": "meanwhile"}, ANY)})


def main() -> None:
    path = sys.argv[1]
    key = os.environ.get("CHANGE_MEANWHILE")
    if key:
        asyncio.run(change_meanwhile(os.environ["AGENT_STATE_URL"], key))
    with open(path, encoding="utf-8") as file:
        document = json.load(file)
    document["edited"] = True
    with open(path, "w", encoding="utf-8") as file:
        json.dump(document, file)


if __name__ == "__main__":
    main()
