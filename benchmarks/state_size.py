"""How a turn's cost follows the change: 1 KB, 100 KB and 1 MB conversation documents, with a
top-level change, a nested one-member change, and no change, on MemoryStorage.

Every turn is a full `AgentApplication` turn without a reply. The top-level change bumps
`count`; the nested one bumps `profile.prefs.n`, three levels down; the unchanged turn reads
`count`. Rows are interleaved per round and timed in CPU seconds (medians). Peak memory is
tracemalloc's peak during one more turn, over the document's serialized size, next to the
peak of `orjson.loads` of the document alone (what any turn that decodes it must allocate).
Targets (issue 16): nested <= 1.5x the top-level change's time; peak <= 2x the document.

Run: .venv/bin/python benchmarks/state_size.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from _support import message

from agent_state import AgentApplication, TurnContext, TurnState, conversation_key
from agent_state.backends import MemoryStorage, StoreItem

SIZES = {"1 KB": 1024, "100 KB": 100 * 1024, "1 MB": 1024 * 1024}
CHANGES = ("top-level", "nested", "none")
POOL = 20


def document(size: int) -> dict[str, Any]:
    """A conversation document of about `size` serialized bytes: a counter, a nested
    profile, and a list of small records."""
    doc: dict[str, Any] = {"count": 0, "profile": {"prefs": {"theme": "dark", "n": 0}}, "items": []}
    while len(orjson.dumps(doc)) < size:
        doc["items"].append({"id": len(doc["items"]), "text": "x" * 80, "tags": ["a", "b"]})
    return doc


async def setup(size: int, change: str) -> Callable[[int], Awaitable[object]]:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        if change == "top-level":
            state["conversation:count"] = state.get("conversation.count") + 1
        elif change == "nested":
            path = "conversation.profile.prefs.n"
            state.set(path, state.get(path) + 1)
        else:
            state.get("conversation.count")

    seed = document(size)
    await storage.write(
        {conversation_key("bench", f"conv-{i}"): StoreItem(seed, None) for i in range(POOL)}
    )
    incoming = [message(i) for i in range(POOL)]
    return lambda i: app.process(incoming[i % POOL])


async def peak_bytes(turn: Callable[[int], Awaitable[object]]) -> int:
    """The most memory allocated at once during one turn, above what was held before it."""
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        await turn(0)
        return tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()


def decode_peak_bytes(serialized: bytes) -> int:
    """The most memory `orjson.loads` of the document alone allocates at once: the floor of
    the peak of any turn that decodes the whole document."""
    tracemalloc.start()
    try:
        orjson.loads(serialized)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def run(rounds: int) -> None:
    print(f"\nState-size sweep: a full turn, no reply; medians of {rounds} interleaved rounds")
    header = f"{'document':<10}{'change':<12}{'us/turn':>10}{'vs top-level':>14}{'peak / doc':>12}"
    print(header)
    print("-" * len(header))
    verdicts = []
    for label, size in SIZES.items():
        turns = {change: await setup(size, change) for change in CHANGES}
        count = max(5, int(4000 / (size / 1024) ** 0.9))
        times: dict[str, list[float]] = {change: [] for change in CHANGES}
        for turn in turns.values():
            await turn(0)
        for _ in range(rounds):
            for change, turn in turns.items():
                started = time.process_time()
                for i in range(count):
                    await turn(i)
                times[change].append((time.process_time() - started) / count * 1e6)
        medians = {change: statistics.median(values) for change, values in times.items()}
        encoded = orjson.dumps(document(size))
        serialized = len(encoded)
        peaks = {change: await peak_bytes(turn) / serialized for change, turn in turns.items()}
        decoding = decode_peak_bytes(encoded) / serialized
        for change in CHANGES:
            relative = medians[change] / medians["top-level"]
            print(
                f"{label:<10}{change:<12}{medians[change]:>10,.0f}{relative:>13.2f}x"
                f"{peaks[change]:>11.1f}x"
            )
        nested = medians["nested"] / medians["top-level"]
        peak = max(peaks.values())
        verdicts.append(
            f"{label}: nested {nested:.2f}x the top-level change "
            f"({'met' if nested <= 1.5 else 'missed'}); peak {peak:.1f}x the document "
            f"({'met' if peak <= 2 else 'missed'}; decoding it alone peaks at {decoding:.1f}x)"
        )
    print("Targets: a nested change <= 1.5x a top-level one; peak memory <= 2x the document.")
    for verdict in verdicts:
        print("  " + verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
