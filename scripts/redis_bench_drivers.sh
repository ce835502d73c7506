#!/usr/bin/env bash
# redis-benchmark against redis-server and examples/kv_server.rs on each IO
# driver (GOFER_IO=epoll, GOFER_IO=uring), the three servers running
# throughout and taking turns test by test:
#
#   redis-benchmark -h 127.0.0.1 -p PORT -t TEST -n N -c C -P P --csv
#
# for each cell "C:P:N" of CELLS and each TEST of TESTS, ROUNDS times. Prints
# one line per invocation: round, clients, pipeline, test, server, requests/s
# and the server's CPU time per request (utime + stime from /proc/PID/stat,
# in 1/CLK_TCK ticks, over the invocation), then the load average. Prints
# only; BENCHMARKS.md's kv_server figures of the io_uring driver ("The io_uring
# driver"; the whole table in docs/bench/history.md) come from its output.
#
#   scripts/redis_bench_drivers.sh
#   CELLS="50:1:100000" TESTS=get ROUNDS=1 scripts/redis_bench_drivers.sh
#
# Needs redis-server and redis-benchmark (Debian's redis-server and
# redis-tools). kv_server runs with `--threads SERVER_THREADS` (2).
set -euo pipefail
cd "$(dirname "$0")/.."

CELLS="${CELLS:-50:1:100000 1000:1:100000 50:16:400000}"
TESTS="${TESTS:-set get}"
ROUNDS="${ROUNDS:-2}"
SERVER_THREADS="${SERVER_THREADS:-2}"

target="${CARGO_TARGET_DIR:-target}"
out="$target/gofer-bench"
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build --release --quiet --example kv_server

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
pids+=("$!")
servers=("redis:$redis_port:$!")

for drv in epoll uring; do
    : >"$out/kv_server-$drv.log" # exists before the first read below
    GOFER_IO=$drv "$target/release/examples/kv_server" --addr 127.0.0.1:0 \
        --threads "$SERVER_THREADS" >"$out/kv_server-$drv.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    port=""
    for _ in $(seq 200); do
        port=$(sed -n '1s/^listening on .*://p' "$out/kv_server-$drv.log")
        [ -n "$port" ] && break
        sleep 0.05
    done
    [ -n "$port" ] || { echo "error: kv_server ($drv) did not start" >&2; exit 1; }
    servers+=("gofer-$drv:$port:$pid")
done
for _ in $(seq 200); do
    [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.05
done

ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

for s in "${servers[@]}"; do
    IFS=: read -r _ port _ <<<"$s"
    redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -n 20000 -c 50 -q >/dev/null 2>&1
done

# The ring driver shows as io_uring file descriptors in the server process
# (a Processer makes its ring at its first IO: counted after the warm-up).
rings=$(ls -l "/proc/${servers[2]##*:}/fd" 2>/dev/null | grep -c io_uring || true)
echo "== gofer-uring holds $rings io_uring descriptors"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round clients pipeline test server req/s cpu_us/req"
for r in $(seq "$ROUNDS"); do
    for cell in $CELLS; do
        IFS=: read -r c p n <<<"$cell"
        for t in $TESTS; do
            for s in "${servers[@]}"; do
                IFS=: read -r name port pid <<<"$s"
                cpu0=$(ticks "$pid")
                rps=$(redis-benchmark -h 127.0.0.1 -p "$port" -t "$t" -n "$n" -c "$c" -P "$p" --csv 2>/dev/null |
                    tr '\r' '\n' | awk -F'"' '$2 != "test" && $4 != "" { r = $4 } END { printf "%.0f", r }')
                cpu1=$(ticks "$pid")
                us=$(awk -v d="$((cpu1 - cpu0))" -v hz="$hz" -v n="$n" 'BEGIN { printf "%.2f", d / hz / n * 1e6 }')
                echo "$r $c $p $t $name $rps $us"
            done
        done
    done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
