# The pages' tests (tests/pages): Debian's chromium, driven by Playwright for Python (the
# .[pages] extra, part of .[dev]; it downloads no browser), and the demo page's bundle of the
# pinned @ag-ui/client (examples/pages/build.sh). Sourced by tests/run.sh; both steps do
# nothing when already done. Nothing runs in the background: each test module starts its
# own server and the browser.

CHROMIUM=/usr/bin/chromium

install_pages() {
  if [ ! -x "$CHROMIUM" ]; then
    log "installing chromium (Debian package)"
    # the package lists are usually fresh from the redis install; update only if needed
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null \
        && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
  fi
  bash examples/pages/build.sh
}

start_pages() {
  export AGENT_STATE_CHROMIUM="$CHROMIUM"  # tests/pages/conftest.py launches this one
}
