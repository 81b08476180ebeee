#!/usr/bin/env bash
# A throwaway PostgreSQL server for the shared-study tests (issue 14): a cluster in a temporary
# folder, listening on a free loopback port only, trust authentication, removed when done.
#
#   tools/pg_throwaway.sh run -- CMD ARGS…   start, export FITPLAN_PG_URL, run CMD, stop + remove
#   eval "$(tools/pg_throwaway.sh start)"    start; prints `export FITPLAN_PG_URL=… FITPLAN_PG_DIR=…`
#   tools/pg_throwaway.sh stop "$FITPLAN_PG_DIR"   stop the server and remove its folder
#
# Needs Debian's server package (apt-get install -y postgresql); the binaries are found with
# pg_config or under /usr/lib/postgresql/*/bin. As root, the server runs as the `postgres` user
# (initdb refuses root). The URL is SQLAlchemy's: postgresql+psycopg://USER@127.0.0.1:PORT/fitplan
set -euo pipefail

die() { echo "pg_throwaway: $*" >&2; exit 2; }

bindir() {
    local d
    if [[ -n "${PG_BINDIR:-}" ]]; then echo "$PG_BINDIR"; return; fi
    if command -v pg_config >/dev/null 2>&1; then
        d="$(pg_config --bindir)"
        [[ -x "$d/initdb" ]] && { echo "$d"; return; }
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x "$d/initdb" ]] && { echo "$d"; return; }
    done
    die "no PostgreSQL server binaries (initdb); install them: apt-get install -y postgresql"
}

free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

as_owner() {  # run a server binary as the cluster's owner
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start() {
    local bin dir port user
    bin="$(bindir)"
    dir="$(mktemp -d "${TMPDIR:-/tmp}/fitplan-pg.XXXXXX")"
    if [[ "$(id -u)" == 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' user (the Debian package makes it)"
        chown postgres: "$dir"
        user=postgres
    else
        user="$(id -un)"
    fi
    as_owner "$bin/initdb" -D "$dir/data" -U "$user" -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; rm -rf "$dir"; die "initdb failed"; }
    port="$(free_port)"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=100 -c fsync=off" start \
        >/dev/null || { cat "$dir/server.log" >&2; rm -rf "$dir"; die "the server did not start"; }
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$user" fitplan \
        || { stop "$dir"; die "createdb failed"; }
    echo "$port" >"$dir/port"
    echo "export FITPLAN_PG_URL=postgresql+psycopg://$user@127.0.0.1:$port/fitplan FITPLAN_PG_DIR=$dir"
}

stop() {
    local dir="${1:-${FITPLAN_PG_DIR:-}}" bin
    [[ -n "$dir" && -d "$dir/data" ]] || die "stop needs the folder that start printed (FITPLAN_PG_DIR)"
    bin="$(bindir)"
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}

case "${1:-}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    run)
        shift
        [[ "${1:-}" == "--" ]] && shift
        [[ $# -gt 0 ]] || die "run needs a command: tools/pg_throwaway.sh run -- pytest …"
        eval "$(start)"
        trap 'stop "$FITPLAN_PG_DIR"' EXIT INT TERM
        echo "pg_throwaway: $FITPLAN_PG_URL" >&2
        "$@"
        ;;
    *) die "usage: pg_throwaway.sh start | stop DIR | run -- CMD…" ;;
esac
