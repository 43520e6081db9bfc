#!/usr/bin/env bash
# Install PostgreSQL from Debian packages, and start/stop a throwaway server on loopback for the tests.
#
#   scripts/postgres.sh install          # apt-get install postgresql when no server binaries are found (root)
#   scripts/postgres.sh start [PORT]     # initdb in a new temp folder, listen on 127.0.0.1:PORT only;
#                                        # prints the DSN, then the folder
#   scripts/postgres.sh stop DIR         # fast shutdown of the server in DIR, then delete DIR
#   scripts/postgres.sh bindir           # print the server binaries' folder (exit 1 when none)
#
# The throwaway server trusts local connections and runs with fsync off: it holds test data only,
# listens on loopback only, and its folder is deleted by whoever created it.
set -euo pipefail

die() { echo "postgres.sh: $*" >&2; exit 1; }

bindir() {
    local dir
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir; return 0
    fi
    # Debian keeps the server binaries out of PATH, one folder per major version; take the newest.
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then echo "$dir"; return 0; fi
    done
    if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return 0; fi
    return 1
}

# Run a server binary as an unprivileged user: initdb and postgres refuse to run as root.
as_db_user() {
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user (install the postgresql package)"
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'PY'
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
PY
}

cmd_install() {
    if bindir >/dev/null; then echo "postgresql already installed: $(bindir)"; return 0; fi
    [ "$(id -u)" -eq 0 ] || die "installing needs root: sudo $0 install (or apt-get install postgresql)"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install PostgreSQL (initdb, pg_ctl) with your package manager"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # The package's own cluster is not needed: the tests start their own server in a temp folder.
    apt-get install -y -q --no-install-recommends postgresql >/dev/null
    bindir >/dev/null || die "apt-get finished but no initdb was found"
    echo "postgresql installed: $(bindir)"
}

cmd_start() {
    local port="${1:-}" bin base data
    bin="$(bindir)" || die "PostgreSQL is not installed: run '$0 install' as root (Debian: apt-get install postgresql)"
    [ -n "$port" ] || port="$(free_port)"
    # A fresh folder directly under the temp dir, so the 'postgres' user can reach it when we are root.
    base="$(mktemp -d "${TMPDIR:-/tmp}/guardrail-pg.XXXXXX")"
    touch "$base/.guardrail-throwaway"
    data="$base/data"
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$base"; fi
    as_db_user "$bin/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 >"$base/initdb.log" 2>&1 \
        || { cat "$base/initdb.log" >&2; rm -rf "$base"; die "initdb failed"; }
    as_db_user "$bin/pg_ctl" -D "$data" -l "$base/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $base -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50" \
        start >/dev/null || { tail -20 "$base/server.log" >&2 || true; rm -rf "$base"; die "the server did not start on port $port"; }
    echo "postgresql://postgres@127.0.0.1:$port/postgres"
    echo "$base"
}

cmd_stop() {
    local base="${1:?usage: postgres.sh stop DIR}" bin
    [ -f "$base/.guardrail-throwaway" ] || die "$base was not made by '$0 start'; not touching it"
    bin="$(bindir)" || die "PostgreSQL is not installed"
    if [ -f "$base/data/postmaster.pid" ]; then
        as_db_user "$bin/pg_ctl" -D "$base/data" -m fast -w -t 30 stop >/dev/null
    fi
    rm -rf "$base"
}

case "${1:-}" in
    install) cmd_install ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    bindir) bindir ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
