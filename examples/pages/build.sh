#!/usr/bin/env bash
# Builds the demo page's AG-UI client: the npm @ag-ui/client (pinned, the version the tests
# use) bundled by esbuild (pinned) into examples/pages/bundle/ag-ui-client.js, which the
# demo server serves. Nothing third-party is committed: bundle/ and .npm/ are gitignored.
# Idempotent: does nothing when the bundle of these versions is there. Needs Node.js and npm.
set -euo pipefail
cd "$(dirname "$0")"
CLIENT_VERSION=1.0.0
ESBUILD_VERSION=0.28.2
STAMP="@ag-ui/client@$CLIENT_VERSION esbuild@$ESBUILD_VERSION"
OUT=bundle/ag-ui-client.js

if [ -f "$OUT" ] && [ "$(cat bundle/.versions 2>/dev/null)" = "$STAMP" ]; then exit 0; fi
command -v npm >/dev/null || { echo "build.sh: npm is needed to bundle @ag-ui/client" >&2; exit 1; }
npm install --prefix .npm --no-audit --no-fund --silent \
  "@ag-ui/client@$CLIENT_VERSION" "@ag-ui/core@$CLIENT_VERSION" "esbuild@$ESBUILD_VERSION" >/dev/null
mkdir -p bundle
NODE_PATH=.npm/node_modules .npm/node_modules/.bin/esbuild client-entry.js --bundle --format=esm --platform=browser \
  --minify --log-level=warning --outfile="$OUT"
echo "$STAMP" >bundle/.versions
echo "built examples/pages/$OUT ($STAMP)" >&2
