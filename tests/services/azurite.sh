# Azurite (the Azure Storage emulator, npm) for the Azure Blob backend tests; sourced by
# tests/run.sh, which provides ROOT, RUN_DIR, PIDS, log, wait_for_port and port_free.
# Installed once into $ROOT/.test-npm/azurite (RUN_DIR is wiped on every run); pinned to
# 3.35.0, the last release that runs on Node 20.

AZURITE_VERSION=3.35.0
AZURITE_DIR="$ROOT/.test-npm/azurite"
AZURITE_MAIN="$AZURITE_DIR/node_modules/azurite/dist/src/blob/main.js"

install_azurite() {
  command -v node >/dev/null || { log "Azurite needs Node.js 20 (node not found)"; exit 1; }
  local installed="$AZURITE_DIR/node_modules/azurite/package.json"
  if [ -f "$AZURITE_MAIN" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$installed"; then
    return
  fi
  log "installing azurite@$AZURITE_VERSION (npm)"
  mkdir -p "$AZURITE_DIR"
  npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --silent "azurite@$AZURITE_VERSION" >/dev/null
}

start_azurite() {
  AZURITE_PORT=$(pick_port 10000)
  # node itself, not npx: $! must be the server's PID so run.sh can stop it; the preload
  # keeps the emulator's GC from stalling it mid-run (see azurite_gc.js)
  node -r "$ROOT/tests/services/azurite_gc.js" "$AZURITE_MAIN" --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" --inMemoryPersistence \
    --silent --disableTelemetry --skipApiVersionCheck >"$RUN_DIR/azurite.log" 2>&1 &
  PIDS+=($!)
  wait_for_port "$AZURITE_PORT" "azurite"
  export AGENT_STATE_AZURITE_MAIN="$AZURITE_MAIN"  # tests start private servers from it too
  # the emulator's public development account (the same for every Azurite install)
  export AGENT_STATE_AZURITE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:$AZURITE_PORT/devstoreaccount1;"
}
