"""`python -m agent_state`: the `agent-state` command line."""

from agent_state.cli import main

main()
