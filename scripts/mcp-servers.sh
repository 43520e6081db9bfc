#!/usr/bin/env bash
# Install the reference MCP filesystem server from npm for the MCP tests and `guardrail bench mcp`.
#
#   scripts/mcp-servers.sh install    # npm install @modelcontextprotocol/server-filesystem (pinned) when missing
#   scripts/mcp-servers.sh path       # print the server's entry script (exit 1 when not installed)
#
# It goes into $GUARDRAIL_MCP_SERVERS (default ~/.cache/guardrail/mcp-servers), outside the checkout, where
# the tests look for it; they skip with the install command when it is not there. The git server is a Python
# package (mcp-server-git, in the 'mcp' extra).
set -euo pipefail

VERSION="2026.8.31"
PACKAGE="@modelcontextprotocol/server-filesystem"
DIR="${GUARDRAIL_MCP_SERVERS:-$HOME/.cache/guardrail/mcp-servers}"
ENTRY="$DIR/node_modules/$PACKAGE/dist/index.js"

die() { echo "mcp-servers.sh: $*" >&2; exit 1; }

installed_version() {
    node -e "process.stdout.write(require(process.argv[1]).version)" "$DIR/node_modules/$PACKAGE/package.json" 2>/dev/null
}

cmd_install() {
    command -v node >/dev/null 2>&1 || die "node is not installed (Debian: apt-get install nodejs npm)"
    command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"
    if [ -f "$ENTRY" ] && [ "$(installed_version)" = "$VERSION" ]; then
        echo "$PACKAGE $VERSION already installed: $ENTRY"; return 0
    fi
    mkdir -p "$DIR"
    npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "$PACKAGE@$VERSION" >/dev/null \
        || die "npm install $PACKAGE@$VERSION failed"
    [ -f "$ENTRY" ] || die "npm finished but $ENTRY is missing"
    echo "$PACKAGE $VERSION installed: $ENTRY"
}

cmd_path() {
    [ -f "$ENTRY" ] || die "$PACKAGE is not installed: run '$0 install'"
    echo "$ENTRY"
}

case "${1:-}" in
    install) cmd_install ;;
    path) cmd_path ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
