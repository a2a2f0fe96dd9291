"""A forget that dies: `python -m tests.lifecycle.forget_worker URL USER N` forgets USER on
the test channel and kills itself (SIGKILL) as its N-th delete batch starts."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from agent_state import forget_user, open_storage
from agent_state.backends import Outcomes
from tests.lifecycle.support import CHANNEL


async def main(url: str, user: str, die_at: int) -> None:
    async with open_storage(url) as storage:
        deletes = 0
        delete = storage._delete

        async def dying(keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
            nonlocal deletes
            deletes += 1
            if deletes == die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            await delete(keys, if_match, outcomes)

        storage._delete = dying  # type: ignore[method-assign]
        await forget_user(storage, CHANNEL, user)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
