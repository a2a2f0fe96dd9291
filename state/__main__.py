"""`python -m agent_state`: the `agent-state` command line."""

from .cli import main

main()
