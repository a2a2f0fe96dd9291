# Cosmos DB: the project's own protocol emulator (tests/cosmos_emulator), run by the venv's
# Python; it needs nothing beyond aiohttp, which the venv already has. Sourced by tests/run.sh.


install_cosmos() {
  :  # nothing to install: the emulator is part of the tests
}

start_cosmos() {
  COSMOS_PORT=$(pick_port 8081)
  .venv/bin/python -m tests.cosmos_emulator --host 127.0.0.1 --port "$COSMOS_PORT" &
  PIDS+=($!)
  wait_for_port "$COSMOS_PORT" "cosmos emulator"
  export AGENT_STATE_COSMOS_ENDPOINT="http://127.0.0.1:$COSMOS_PORT"
  AGENT_STATE_COSMOS_KEY=$(.venv/bin/python -c 'from tests.cosmos_emulator import MASTER_KEY; print(MASTER_KEY)')
  export AGENT_STATE_COSMOS_KEY
}
