"""A Google ADK agent and an agent-state bot sharing one user's state on our store.

The ADK side is the SDK's own `Runner` with an agent that makes no model call (it counts
visits in `user:` state); only its session service (`AgentStateSessionService`) comes from
agent-state. The bot is an agent-state `AgentApplication` in the same namespace and channel,
so `state["user:visits"]` there is `user:visits` in the agent's sessions.

    python examples/adk_agent.py [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.genai import types

from agent_state import AgentApplication, TurnContext, TurnState, open_storage
from agent_state.bridges.adk import AgentStateSessionService

APP = "greeter"


class Greeter(BaseAgent):
    """Greets the user and counts their visits (no model call)."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        visits = int(ctx.session.state.get("user:visits", 0)) + 1
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"visit {visits}")]),
            actions=EventActions(state_delta={"user:visits": visits, "last_agent": "adk"}),
        )


async def main(folder: str) -> None:
    storage = open_storage(Path(folder).resolve().as_uri())
    service = AgentStateSessionService(storage, channel_id="web")  # namespace: the app name
    runner = Runner(app_name=APP, agent=Greeter(name="greeter"), session_service=service)

    bot = AgentApplication(storage, app_name="greeter-bot", namespace=APP)

    @bot.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["user:visits"] = state.get("user.visits", 0) + 1
        await ctx.send(f"bot: visit {state['user:visits']}")

    session = await service.create_session(app_name=APP, user_id="ada")
    for text in ("hi agent", "hello again"):
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in runner.run_async(
            user_id="ada", session_id=session.id, new_message=message
        ):
            if event.content and event.content.parts:
                print(f"agent: {event.content.parts[0].text}")
    activity = {
        "type": "message", "channelId": "web", "text": "hi bot",
        "from": {"id": "ada"}, "conversation": {"id": "web-chat"},
    }  # fmt: skip
    print((await bot.process(activity))[0].text)

    shared = await service.get_user_state(app_name=APP, user_id="ada")
    loaded = await service.get_session(app_name=APP, user_id="ada", session_id=session.id)
    assert loaded is not None
    print(f"user state: {shared}; the agent's session holds {len(loaded.events)} events")
    await storage.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="./.adk-agent-state", help="folder of the file store")
    asyncio.run(main(parser.parse_args().dir))
