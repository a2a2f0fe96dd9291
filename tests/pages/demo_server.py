"""The demo page's server for the browser tests: the example's page, model and planner, and a
gate per thread that a test holds and releases through test-only routes, so a run can be
caught mid-stream without sleeping.

    python -m tests.pages.demo_server --port 8000 --dir ./state
"""

from __future__ import annotations

import argparse
import asyncio
import runpy
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from agent_state import write_group
from agent_state.agui import AgentRun, AGUIEndpoint
from agent_state.backends import FileStorage

EXAMPLE = runpy.run_path(
    str(Path(__file__).resolve().parents[2] / "examples" / "agui_server.py"), run_name="agui_server"
)
HELD: dict[str, asyncio.Event] = {}
"""Threads whose next run waits, after streaming a step, until the test releases it."""


async def agent(run: AgentRun[Any]) -> None:
    """The example's planner; on a held thread it first shows a waiting step and waits."""
    gate = HELD.get(run.input.thread_id)
    if gate is not None:
        run.state.steps.append(EXAMPLE["Step"](title="waiting for the test", status="doing"))
        await run.sync()
        await gate.wait()
        run.state.steps.pop()
    await EXAMPLE["planner"](run)


async def hold(request: Request) -> Response:
    HELD[request.path_params["thread"]] = asyncio.Event()
    return Response(status_code=204)


async def release(request: Request) -> Response:
    gate = HELD.pop(request.path_params["thread"], None)
    if gate is None:
        return Response(status_code=404)
    gate.set()
    return Response(status_code=204)


def build(folder: str) -> Starlette:
    endpoint = AGUIEndpoint(
        agent,
        storage=FileStorage(folder, write_group=write_group),
        state=EXAMPLE["Plan"],
        authenticate=EXAMPLE["authenticate"],
        server_only=["runs"],
    )
    return Starlette(
        routes=[
            Route("/test/hold/{thread}", hold, methods=["POST"]),
            Route("/test/release/{thread}", release, methods=["POST"]),
            *EXAMPLE["page_routes"](),
            Mount("/", endpoint),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args()
    uvicorn.run(build(args.dir), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
