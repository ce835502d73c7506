#!/usr/bin/env bash
# Drives the example servers with real clients, next to the same servers on
# tokio, monoio and may, in the same run and with the same thread count:
#
#   1. HTTP: wrk against examples/http_server.rs (gofer on epoll, and as
#      gofer-uring on its io_uring driver), bench/benches/servers/http_tokio.rs,
#      bench/benches/servers/http_hyper.rs (hyper 1.x on tokio),
#      bench/benches/servers/http_monoio.rs (monoio on io_uring, thread per
#      core) and bench/benches/servers/http_may.rs, at 100, 1,000 and
#      10,000 connections, with 1 and with 2 wrk threads; prints requests/s,
#      p99 latency, the server's CPU use and its CPU time per request as a
#      Markdown table.
#   2. Echo: `cargo bench -p gofer-bench --bench echo` (1 KiB round trips at 100 and 1,000
#      connections; gofer, gofer-uring, tokio, monoio, may).
#
#   scripts/http_bench.sh                    # everything, about 12 minutes
#   DURATION=5 WRK_THREADS=2 scripts/http_bench.sh   # shorter
#   SERVERS="gofer tokio" scripts/http_bench.sh      # some servers only
#   WRITE=0 scripts/http_bench.sh            # print, leave BENCHMARKS.md
#
# Both tables go into BENCHMARKS.md between the markers
# `<!-- http-bench:start -->` and `<!-- http-bench:end -->` (appended as a
# new section if they are missing; nothing else is touched: scripts/md_section.py), and
# scripts/server_plots.py draws them into docs/bench/.
#
# Every server listens on 127.0.0.1 with port 0, runs with SERVER_THREADS
# threads (2), and is killed at the end, whatever happens. wrk is installed
# with apt-get when it is not on PATH.
#
# The client runs on the same machine: on 2 cores it competes with the
# server for the CPUs, so each figure measures the pair. Run it on a quiet
# machine; the load average is printed before and after each run.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION="${DURATION:-10}"          # seconds measured per wrk run
WARMUP="${WARMUP:-2}"               # seconds of unmeasured wrk run before each
SERVER_THREADS="${SERVER_THREADS:-2}"
WRK_THREADS="${WRK_THREADS:-1 2}"   # wrk thread counts to run
WRITE="${WRITE:-1}"                 # 1: write the tables into BENCHMARKS.md
CONNECTIONS="${CONNECTIONS:-100 1000 10000}"
# The echo client holds both ends of each connection in one process: 10,000
# would pass the hard limit of 20,000 descriptors.
ECHO_CONNECTIONS="${ECHO_CONNECTIONS:-100 1000}"
# Servers to run, in this order (the echo bench runs the same names).
read -r -a SERVERS <<<"${SERVERS:-gofer gofer-uring tokio hyper monoio may}"
# http_bin NAME: the example binary of a server name.
http_bin() {
    case "$1" in
        gofer | gofer-uring) echo http_server ;;
        tokio | hyper | monoio | may) echo "peer_http_$1" ;;
        *) echo "error: unknown server $1" >&2; exit 2 ;;
    esac
}
for name in "${SERVERS[@]}"; do http_bin "$name" >/dev/null; done # unknown names stop here
# gofer's IO driver for a server name (the echo bench's rule): gofer-uring
# runs io_uring, every other name epoll, whatever the environment says.
gofer_io() { if [ "$1" = gofer-uring ]; then echo uring; else echo epoll; fi; }

target="${CARGO_TARGET_DIR:-target}"
out="$target/gofer-bench"
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# --- wrk ---------------------------------------------------------------------
if ! command -v wrk >/dev/null 2>&1; then
    echo "== wrk is not on PATH: installing it with apt-get"
    if ! apt-get install -y wrk >/dev/null 2>&1; then
        apt-get update >/dev/null && apt-get install -y wrk >/dev/null
    fi
fi

# --- open files --------------------------------------------------------------
# N connections need N descriptors in wrk and as many in the server.
max_conns=0
for c in $CONNECTIONS; do [ "$c" -gt "$max_conns" ] && max_conns=$c; done
need=$((max_conns + 256))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
        echo "error: open-file limit $(ulimit -n) is below the $need this run needs" >&2
        exit 1
    fi
fi

# --- build first, so compiling does not load the machine while measuring ------
cargo build -p gofer -p gofer-bench --release --quiet \
    --example http_server --example peer_http_tokio --example peer_http_hyper --example peer_http_may \
    --example peer_http_monoio \
    --example echo_server --example peer_echo_tokio --example peer_echo_may --example peer_echo_monoio
cargo bench -p gofer-bench --no-run --quiet --bench echo

# --- servers -----------------------------------------------------------------
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

server_pid=""
server_addr=""
# start_server NAME LOG: starts it, waits (at most 10 s) for `listening on ADDR`.
start_server() {
    local bin io
    bin=$(http_bin "$1")
    io=$(gofer_io "$1")
    : >"$2" # there before the loop below reads it
    GOFER_IO=$io "$target/release/examples/$bin" --addr 127.0.0.1:0 --threads "$SERVER_THREADS" >"$2" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    for _ in $(seq 200); do
        server_addr=$(sed -n '1s/^listening on //p' "$2")
        [ -n "$server_addr" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "error: $1 did not print 'listening on ADDR':" >&2
    cat "$2" >&2
    exit 1
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
}

# CPU time (user + system) of a process, in clock ticks.
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# wrk's latency figure (e.g. 850.00us, 2.30ms, 1.02s) in milliseconds.
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
        printf "%.2f", n }'
}

hz=$(getconf CLK_TCK)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(load)
rows="$out/http-rows.md"
: >"$rows"
echo "== HTTP: wrk on 127.0.0.1, servers with $SERVER_THREADS threads, ${DURATION}s per run after ${WARMUP}s of warm-up"
echo "== $(nproc) CPUs: wrk competes with the server for them; each figure measures the pair"
echo "== load average before: $(load)"
echo
echo "| connections | wrk threads | server | requests/s | p99 latency | server CPU | CPU per request | errors | load (1 min) |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
for c in $CONNECTIONS; do
    for t in $WRK_THREADS; do
        for name in "${SERVERS[@]}"; do
            log="$out/http-$name-$c-$t.log"
            start_server "$name" "$log.server"
            wrk -t"$t" -c"$c" -d"${WARMUP}s" --timeout 5s "http://$server_addr/" >/dev/null
            cpu0=$(ticks "$server_pid")
            wrk -t"$t" -c"$c" -d"${DURATION}s" --timeout 5s --latency "http://$server_addr/" >"$log"
            cpu1=$(ticks "$server_pid")
            stop_server
            rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$log")
            p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$log")")
            errors=$(awk '/Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 }
                          /Non-2xx/ { n += $5 } END { print n + 0 }' "$log")
            cpu=$(awk -v d="$((cpu1 - cpu0))" -v hz="$hz" -v s="$DURATION" \
                'BEGIN { printf "%.0f %%", 100 * d / hz / s }')
            # Server CPU time over requests served: robust where req/s is
            # not (the client shares the 2 cores).
            served=$(awk '/requests in/ { print $1 }' "$log")
            per=$(awk -v d="$((cpu1 - cpu0))" -v hz="$hz" -v n="$served" \
                'BEGIN { printf "%.2f us", (n > 0 ? 1e6 * d / hz / n : 0) }')
            echo "| $c | $t | $name | $rps | $p99 ms | $cpu | $per | $errors | $(cut -d' ' -f1 /proc/loadavg) |" | tee -a "$rows"
        done
    done
done
echo
echo "== load average after HTTP: $(load)"
echo

echo "== echo: cargo bench -p gofer-bench --bench echo"
echo_out="$out/echo.txt"
echo_servers=$(printf '%s\n' "${SERVERS[@]}" | grep -vx hyper | paste -sd, -) # no hyper echo peer
cargo bench -p gofer-bench --quiet --bench echo -- --threads "$SERVER_THREADS" \
    --connections "${ECHO_CONNECTIONS// /,}" --servers "$echo_servers" |
    tee "$echo_out"
load_after=$(load)

[ "$WRITE" = 1 ] || exit 0
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
table=$(
    echo "<!-- generated by scripts/http_bench.sh; edits between these markers are overwritten -->"
    echo
    echo "**Run: $started**, commit $commit, $(nproc) CPUs, servers with $SERVER_THREADS threads,"
    echo "wrk for ${DURATION} s per cell after ${WARMUP} s of warm-up; load average before"
    echo "$load_before, after $load_after."
    echo
    echo "| connections | wrk threads | server | requests/s | p99 latency | server CPU | CPU per request | errors | load (1 min) |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|"
    cat "$rows"
    echo
    echo "Echo (\`cargo bench -p gofer-bench --bench echo\`, 1 KiB messages, the client in the bench's process):"
    echo
    echo "| connections | server | round trips/s | p50 | p99 | server CPU | CPU per round trip | errors |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|"
    # The bench's rows: connections, server, round trips/s, p50, p99, CPU
    # (a number, then "%"), CPU per round trip, errors.
    awk '$1 ~ /^[0-9]+$/ && NF == 9 { printf "| %s | %s | %s | %s | %s | %s %% | %s | %s |\n", $1, $2, $3, $4, $5, $6, $8, $9 }' "$echo_out"
)
printf '%s\n' "$table" |
    python3 scripts/md_section.py http-bench "HTTP and echo: the last run of scripts/http_bench.sh"
python3 scripts/server_plots.py
