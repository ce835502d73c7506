#!/usr/bin/env bash
# redis-benchmark against examples/kv_server.rs (gofer) and redis-server
# itself, in the same run:
#
#   redis-benchmark -h 127.0.0.1 -p PORT -t TEST -n 200000 -c C -P P --csv
#
# for TEST in set, get, incr, lpush, lpop (one invocation each, so that the
# server's CPU time can be read around each), C in 50 and 1000, P in 1 and
# 16, the two servers taking turns test by test. For each it records
# requests/s, p50 and p99 latency, and the server's CPU time per request:
# utime + stime of the server process from /proc/PID/stat, before and after,
# divided by the requests (ticks of 1/CLK_TCK s: at -P 16 a test lasts a
# fraction of a second, so that figure is coarse there).
#
#   scripts/redis_bench.sh                       # everything, a few minutes
#   REQUESTS=50000 CONNECTIONS=50 scripts/redis_bench.sh   # shorter
#   WRITE=0 scripts/redis_bench.sh               # print, leave BENCHMARKS.md
#
# redis-server runs as `redis-server --port P --save "" --appendonly no`
# (no persistence, like kv_server) on 127.0.0.1; kv_server runs with
# `--threads SERVER_THREADS` (2). redis-tools and redis-server are installed
# with apt-get when missing. The table goes into BENCHMARKS.md between the
# markers `<!-- redis-bench:start -->` and `<!-- redis-bench:end -->`
# (appended as a new section if they are missing; nothing else is touched),
# and scripts/server_plots.py draws it into docs/bench/redis.svg.
#
# The client runs on the same machine and competes with the server for the
# cores: each figure measures the pair. redis-benchmark uses one thread,
# redis-server one, kv_server SERVER_THREADS plus gofer's Dispatcher.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${REQUESTS:-200000}"
CONNECTIONS="${CONNECTIONS:-50 1000}"
PIPELINES="${PIPELINES:-1 16}"
TESTS="${TESTS:-set get incr lpush lpop}"
SERVER_THREADS="${SERVER_THREADS:-2}"
WRITE="${WRITE:-1}"

target="${CARGO_TARGET_DIR:-target}"
out="$target/gofer-bench"
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# --- tools -------------------------------------------------------------------
if ! command -v redis-benchmark >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
    echo "== installing redis-tools and redis-server with apt-get"
    if ! apt-get install -y redis-tools redis-server >/dev/null 2>&1; then
        apt-get update >/dev/null && apt-get install -y redis-tools redis-server >/dev/null
    fi
fi

# --- open files --------------------------------------------------------------
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
cargo build --release --quiet --example kv_server

# --- servers -----------------------------------------------------------------
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --logfile "" >"$out/redis-server.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")

"$target/release/examples/kv_server" --addr 127.0.0.1:0 --threads "$SERVER_THREADS" \
    >"$out/kv_server.log" 2>&1 &
gofer_pid=$!
pids+=("$gofer_pid")

gofer_port=""
for _ in $(seq 200); do
    gofer_port=$(sed -n '1s/^listening on .*://p' "$out/kv_server.log")
    ready=1
    [ -n "$gofer_port" ] || ready=0
    [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] || ready=0
    [ "$ready" = 1 ] && break
    kill -0 "$redis_pid" 2>/dev/null && kill -0 "$gofer_pid" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$gofer_port" ] || [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" != PONG ]; then
    echo "error: the servers did not start" >&2
    cat "$out/kv_server.log" "$out/redis-server.log" >&2
    exit 1
fi

# CPU time (user + system) of a process, in clock ticks.
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# bench PORT TEST C P: prints "rps p50 p99" from redis-benchmark's CSV.
bench() {
    redis-benchmark -h 127.0.0.1 -p "$1" -t "$2" -n "$REQUESTS" -c "$3" -P "$4" --csv 2>/dev/null |
        tr '\r' '\n' | awk -F'"' '$2 != "test" && $4 != "" { r = $4; p50 = $10; p99 = $14 }
                                  END { printf "%.0f %s %s\n", r, p50, p99 }'
}

# Warm-up: fault in both servers' memory and connection paths.
for port in "$redis_port" "$gofer_port"; do
    redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -n 20000 -c 50 -q >/dev/null 2>&1
done

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(load)
echo "== redis-benchmark, $REQUESTS requests per test, on 127.0.0.1; kv_server with $SERVER_THREADS threads"
echo "== $(nproc) CPUs; $(redis-server --version | cut -d' ' -f1-3); load average before: $load_before"

rows="$out/redis-bench.rows"
: >"$rows"
for c in $CONNECTIONS; do
    for p in $PIPELINES; do
        for t in $TESTS; do
            line="$c $p $t"
            for s in redis:"$redis_port":"$redis_pid" gofer:"$gofer_port":"$gofer_pid"; do
                IFS=: read -r _ port pid <<<"$s"
                cpu0=$(ticks "$pid")
                read -r rps p50 p99 < <(bench "$port" "$t" "$c" "$p")
                cpu1=$(ticks "$pid")
                us=$(awk -v d="$((cpu1 - cpu0))" -v hz="$hz" -v n="$REQUESTS" \
                    'BEGIN { printf "%.2f", d / hz / n * 1e6 }')
                line="$line $rps $p50 $p99 $us"
            done
            echo "$line" >>"$rows"
            echo "  $line"
        done
    done
done
load_after=$(load)
echo "== load average after: $load_after"

# --- the table ---------------------------------------------------------------
table="$out/redis-bench.md"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
    echo "<!-- generated by scripts/redis_bench.sh; edits between these markers are overwritten -->"
    echo
    echo "**Run: $started**, commit $commit, $(nproc) CPUs, $(redis-server --version | cut -d' ' -f3 | sed 's/v=/redis-server /'),"
    echo "kv_server with $SERVER_THREADS threads, $REQUESTS requests per test, load average before"
    echo "$load_before, after $load_after."
    echo
    echo "| clients | pipeline | test | redis-server req/s | gofer req/s | gofer ÷ redis | p50 / p99 ms, redis | p50 / p99 ms, gofer | server CPU µs/req, redis | gofer |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    awk 'function th(n,   s, r) { s = sprintf("%d", n); r = ""
                                   while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
                                   return s r }
         { printf "| %s | %s | %s | %s | %s | %.2f | %s / %s | %s / %s | %s | %s |\n",
                  th($1), $2, toupper($3), th($4), th($8), ($4 > 0 ? $8 / $4 : 0), $5, $6, $9, $10, $7, $11 }' "$rows"
    echo
    echo "Per cell, gofer ÷ redis-server (geometric mean over the tests, lowest):"
    echo
    echo "| clients | pipeline | gofer ÷ redis, mean | lowest | goal |"
    echo "|---:|---:|---:|---:|---:|"
    awk '{ k = $1 " " $2; if ($4 > 0 && $8 > 0) { l[k] += log($8 / $4); n[k]++
                                               if (!(k in lo) || $8 / $4 < lo[k]) lo[k] = $8 / $4 }
           if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
         END { for (i = 1; i <= m; i++) { k = order[i]; split(k, f, " ")
                   goal = (f[2] == 1 ? "≥ 1.0" : "≥ 0.8")
                   printf "| %s | %s | %.2f | %.2f | %s |\n", f[1], f[2], exp(l[k] / n[k]), lo[k], goal } }' "$rows"
} >"$table"
echo
cat "$table"

if [ "$WRITE" = 1 ]; then
    python3 scripts/md_section.py redis-bench "Redis protocol: kv_server against redis-server" <"$table"
    python3 scripts/server_plots.py
fi
