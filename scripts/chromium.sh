#!/usr/bin/env bash
# Install Chromium from Debian packages for the report's browser test, and print how to start it headless.
#
#   scripts/chromium.sh install    # apt-get install chromium when no Chromium is found (root)
#   scripts/chromium.sh path       # print the browser's path (exit 1 when none)
#
# The test (tests/test_report_browser.py) starts it itself: --headless --no-sandbox (root) --disable-gpu and
# the flags that keep it off the network (this machine has none), with a fresh --user-data-dir.
set -euo pipefail

die() { echo "chromium.sh: $*" >&2; exit 1; }

browser() {
    local name
    for name in chromium chromium-browser chromium-headless-shell google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
    done
    return 1
}

cmd_install() {
    if browser >/dev/null; then echo "chromium already installed: $(browser)"; return 0; fi
    [ "$(id -u)" -eq 0 ] || die "installing needs root: sudo $0 install (or apt-get install chromium)"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install Chromium with your package manager"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
    browser >/dev/null || die "apt-get finished but no chromium was found"
    echo "chromium installed: $(browser)"
}

case "${1:-}" in
    install) cmd_install ;;
    path) browser ;;
    *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
