"""An AG-UI agent sharing a plan with its client: no model, every reply is deterministic.

The first run turns the user's message ("write the notes, tag the release, announce it")
into a plan of steps; each later run finishes the current step and starts the next, sending
each change as a STATE_DELTA. The client may edit the plan between runs (rename or add a
step): its edits are merged into the stored plan. The `runs` counter is stored with the plan
but never leaves the server. Threads live in local files under `./.agui-state` (or `--dir`,
or the AGENT_STATE_AGUI_DIR environment variable).

It also serves the demo page, http://127.0.0.1:8000/demo/ (examples/pages/: a plan editor on
the real @ag-ui/client, bundled once by `bash examples/pages/build.sh`, which needs npm):

    bash examples/pages/build.sh
    python examples/agui_server.py --port 8000   # or, in the repository root:
    uvicorn examples.agui_server:app --port 8000

Point an AG-UI client at it (the user comes from the X-User header):

    import { HttpAgent } from "@ag-ui/client";
    const agent = new HttpAgent({url: "http://127.0.0.1:8000/", headers: {"X-User": "ada"},
                                 threadId: "release"});
    agent.addMessage({id: "m1", role: "user", content: "write the notes, tag it, announce it"});
    await agent.runAgent();   // agent.state.steps: the plan; agent.messages: the thread
    agent.setState({steps: [...agent.state.steps, {title: "celebrate", status: "todo"}]});
    agent.addMessage({id: "m2", role: "user", content: "next"});
    await agent.runAgent();

or with curl (the events stream back as server-sent events):

    curl -N -H 'X-User: ada' -H 'Content-Type: application/json' http://127.0.0.1:8000/ -d \
      '{"threadId": "release", "runId": "r1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "a, b"}]}'
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse
from starlette.routing import BaseRoute, Mount, Route

from agent_state import write_group
from agent_state.agui import AgentRun, AGUIEndpoint
from agent_state.backends import FileStorage

DEFAULT_DIR = "./.agui-state"
DIR_VARIABLE = "AGENT_STATE_AGUI_DIR"
PAGES = Path(__file__).resolve().parent / "pages"
PAGE_FILES = {
    "": "index.html",
    "app.js": "app.js",
    "style.css": "style.css",
    "ag-ui-client.js": "bundle/ag-ui-client.js",  # built by build.sh, never committed
}


class Step(BaseModel):
    title: str
    status: Literal["todo", "doing", "done"] = "todo"


class Plan(BaseModel):
    """The thread's state: `steps` is shared with the client, `runs` stays on the server."""

    steps: list[Step] = Field(default_factory=list)
    runs: int = 0


async def planner(run: AgentRun[Plan]) -> None:
    """One run: plan from the user's message first, then advance one step per run."""
    plan = run.state
    plan.runs += 1
    if not plan.steps:
        parts = re.split(r"[,;]", _last_user_text(run))
        plan.steps = [Step(title=part.strip()) for part in parts if part.strip()]
        await run.sync()
        if not plan.steps:
            await run.say("Tell me what to plan, as steps separated by commas.")
            return
    else:
        for step in plan.steps:
            if step.status == "doing":
                step.status = "done"
                await run.sync()
                break
    pending = [step for step in plan.steps if step.status == "todo"]
    done = sum(step.status == "done" for step in plan.steps)
    if not pending:
        await run.say(f"All {done} steps are done.")
        return
    pending[0].status = "doing"
    await run.sync()
    await run.say(f"{done}/{len(plan.steps)} done; now working on {pending[0].title!r}.")


def _last_user_text(run: AgentRun[Plan]) -> str:
    texts = [m.content for m in run.input.messages if m.role == "user"]
    return texts[-1] if texts and isinstance(texts[-1], str) else ""


def authenticate(request: Request) -> str | None:
    """The user of a request, or None (401). A real app plugs its authentication in here
    (a verified session cookie or bearer token); trusting a plain header is for the demo."""
    return request.headers.get("x-user") or None


def page_routes(pages: Path = PAGES) -> list[BaseRoute]:
    """The demo page under /demo/: our HTML, script and style, and the bundled client (a
    clear error when it was not built: the page must not fall back to a CDN)."""
    bundle = pages / PAGE_FILES["ag-ui-client.js"]
    if not bundle.is_file():
        raise SystemExit(
            f"the demo page needs {bundle}: run `bash examples/pages/build.sh` first "
            "(it bundles the pinned @ag-ui/client with npm)"
        )

    def serve(name: str) -> Route:
        path = pages / PAGE_FILES[name]
        return Route(f"/demo/{name}", lambda request: FileResponse(path), methods=["GET"])

    redirect = Route("/demo", lambda request: RedirectResponse("/demo/"), methods=["GET"])
    return [redirect, *(serve(name) for name in PAGE_FILES)]


def build_app(storage: FileStorage) -> Starlette:
    """The ASGI app: POST a RunAgentInput to / (the thread service beside it), the demo page
    at /demo/ (mount the endpoint in Starlette or FastAPI at will)."""
    endpoint = AGUIEndpoint(
        planner, storage=storage, state=Plan, authenticate=authenticate, server_only=["runs"]
    )
    return Starlette(routes=[*page_routes(), Mount("/", endpoint)])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir",
        default=os.environ.get(DIR_VARIABLE, DEFAULT_DIR),
        help=f"state folder (default: ${DIR_VARIABLE} or {DEFAULT_DIR})",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    storage = FileStorage(args.dir, write_group=write_group)
    print(f"state folder: {storage.root}")
    uvicorn.run(build_app(storage), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
else:  # imported (`uvicorn examples.agui_server:app`): the folder from the environment
    app = build_app(FileStorage(os.environ.get(DIR_VARIABLE, DEFAULT_DIR), write_group=write_group))
