"""Our stores under other frameworks, each an optional extra that this package never imports:
`agent_state.bridges.m365` (Microsoft 365 Agents SDK, `.[m365]`) and
`agent_state.bridges.adk` (Google ADK, `.[adk]`)."""
