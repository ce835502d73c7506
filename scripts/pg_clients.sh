#!/usr/bin/env bash
# Sync PostgreSQL clients (`postgres` 0.19, `r2d2_postgres`) against a real
# server: bench/benches/tools/pg_clients.rs, 200 and 1,000 clients, a
# connection per client, each making QUERIES simple queries, as gofer tasks
# under the hooks and as plain threads; then the same through an r2d2 pool.
#
#   scripts/pg_clients.sh                    # 200 and 1000 clients
#   CLIENTS="200" QUERIES=10 scripts/pg_clients.sh
#
# Installs PostgreSQL with apt-get (as root), makes a cluster in a temp
# dir owned by the postgres user, and starts it on 127.0.0.1:PORT with
# max_connections=1100, trust authentication and no durability (fsync off:
# the figures are the clients'). The server is stopped and its directory
# removed on exit. The client and the server share the machine's cores.
set -euo pipefail

PORT=${PORT:-54329}
CLIENTS=${CLIENTS:-"200 1000"}
QUERIES=${QUERIES:-5}
POOL=${POOL:-100}
cd "$(dirname "$0")/.."

if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
fi
BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")

DATA=$(mktemp -d /tmp/gofer-pg.XXXXXX)
chown postgres:postgres "$DATA"
as_pg() { su postgres -s /bin/bash -c "$*"; }
cleanup() {
    as_pg "$BIN/pg_ctl -D $DATA/db -m immediate stop" >/dev/null 2>&1 || true
    rm -rf "$DATA"
}
trap cleanup EXIT
as_pg "$BIN/initdb -D $DATA/db -A trust -U postgres" >/dev/null
as_pg "$BIN/pg_ctl -D $DATA/db -l $DATA/log -w start -o \"-c listen_addresses=127.0.0.1 -c port=$PORT -c max_connections=1100 -c unix_socket_directories=$DATA -c fsync=off -c synchronous_commit=off -c shared_buffers=64MB\"" >/dev/null
ulimit -n 65536 2>/dev/null || true

cargo build -p gofer-bench --release --features hooks --example pg_clients 2>&1 | tail -1
EXE=target/release/examples/pg_clients
CONN="host=127.0.0.1 port=$PORT user=postgres dbname=postgres"
for n in $CLIENTS; do
    for mode in gofer threads; do
        echo "== $n clients, $mode, a connection each"
        "$EXE" --conn "$CONN" --clients "$n" --queries "$QUERIES" --mode "$mode"
    done
    for mode in gofer threads; do
        echo "== $n clients, $mode, r2d2 pool of $POOL"
        "$EXE" --conn "$CONN" --clients "$n" --queries "$QUERIES" --mode "$mode" --pool "$POOL"
    done
done
