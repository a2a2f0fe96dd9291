# The reference AG-UI client (npm @ag-ui/client 1.0.0, pinned): an oracle for StateMirror.
# Sourced by tests/run.sh; nothing runs in the background, the tests start node per batch.

AGUI_CLIENT_DIR="$ROOT/.test-npm/agui"

install_agui_client() {
  if [ -f "$AGUI_CLIENT_DIR/node_modules/@ag-ui/client/package.json" ] \
    && grep -q '"version": "1.0.0"' "$AGUI_CLIENT_DIR/node_modules/@ag-ui/client/package.json"; then
    return
  fi
  command -v npm >/dev/null || { log "npm is needed for the AG-UI client tests"; exit 1; }
  log "installing @ag-ui/client 1.0.0 into $AGUI_CLIENT_DIR"
  mkdir -p "$AGUI_CLIENT_DIR"
  npm install --prefix "$AGUI_CLIENT_DIR" --no-audit --no-fund \
    @ag-ui/client@1.0.0 @ag-ui/core@1.0.0 >/dev/null
}

start_agui_client() {
  export AGENT_STATE_AGUI_CLIENT_DIR="$AGUI_CLIENT_DIR"
}
