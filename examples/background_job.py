"""A background job over stored state: no turn, no activity, just ids and the storage.

It lists every user of a channel, reads their state and grants the "pro" plan to those
with enough visits, each edit re-run on a fresh read if a live turn wrote in between.
Run it after examples/quickstart.py on the same folder (when the folder holds no users
yet it seeds a few first):

    python examples/background_job.py [--dir ./.quickstart-state] [--min-visits 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from agent_state import (
    TurnIds,
    UserState,
    edit_state,
    list_users,
    open_user,
    read_state,
    write_group,
)
from agent_state.backends import FileStorage

CHANNEL = "quickstart"
DEFAULT_DIR = "./.quickstart-state"
DIR_VARIABLE = "AGENT_STATE_QUICKSTART_DIR"
SEED = {"ada": ("Ada", 4), "grace": ("Grace", 2), "linus": ("Linus", 7)}


async def seed(storage: FileStorage) -> None:
    """Store a few users, as if they had chatted with the quickstart bot."""
    for user_id, (name, visits) in SEED.items():
        async with open_user(storage, CHANNEL, user_id) as user:
            user["name"], user["visits"] = name, visits


def grant_pro(min_visits: int) -> Callable[[UserState], None]:
    """The edit for one user; `edit_state` re-runs it on a fresh read after a conflict."""

    def edit(user: UserState) -> None:
        if user.get("visits", 0) >= min_visits:
            user["plan"] = "pro"

    return edit


async def main(directory: Path, min_visits: int) -> None:
    storage = FileStorage(directory, write_group=write_group)
    print(f"state folder: {storage.root}")
    users = [user_id async for user_id in list_users(storage, CHANNEL)]
    if not users:
        print(
            f"no users on channel {CHANNEL!r} yet (run examples/quickstart.py first); "
            f"seeding {', '.join(SEED)}"
        )
        await seed(storage)
        users = [user_id async for user_id in list_users(storage, CHANNEL)]

    for user_id in users:
        ids = TurnIds(channel_id=CHANNEL, user_id=user_id)
        user = await read_state(storage, UserState, ids)
        visits, plan = user.get("visits", 0), user.get("plan", "free")
        if plan == "pro" or visits < min_visits:
            print(f"{user_id}: {visits} visits, plan stays {plan!r}")
            continue
        user = await edit_state(storage, UserState, ids, grant_pro(min_visits))
        print(f"{user_id}: {user.get('visits')} visits -> granted plan {user.get('plan')!r}")
    await storage.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir",
        default=os.environ.get(DIR_VARIABLE, DEFAULT_DIR),
        help=f"state folder (default: ${DIR_VARIABLE} or {DEFAULT_DIR})",
    )
    parser.add_argument("--min-visits", type=int, default=3, help="visits needed for pro")
    args = parser.parse_args()
    asyncio.run(main(Path(args.dir), args.min_visits))
