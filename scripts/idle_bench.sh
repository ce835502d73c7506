#!/usr/bin/env bash
# Idle keep-alive connections: memory per connection, the CPU an idle
# server burns, and how fast all of them are answered when they wake.
#
# For each server (gofer's examples/http_server.rs with its defaults, with
# dense 16 KiB stacks, and parking quiet connections without a task; the
# tokio, may and hyper peers in bench/benches/servers/; Go's net/http when `go`
# is on PATH, built from a 40-line program written to a temporary
# directory):
#
#   1. start it on 127.0.0.1:0 with --threads 2 and read its resident set
#      (VmRSS in /proc/PID/status): "before";
#   2. bench/benches/tools/idle_client.rs (another process) opens N connections,
#      sends GET / on each and reads each response, then goes idle;
#   3. after SETTLE seconds, read the CPU time of each of the server's
#      threads (/proc/PID/task/*/schedstat, in nanoseconds), wait IDLE
#      seconds, read them again and the resident set: "idle"; memory per
#      connection is (idle - before) / N, idle CPU the threads' sum;
#   4. the client sends GET / on all N at once and times the answers.
#
#   scripts/idle_bench.sh                      # N = 10,000, writes BENCHMARKS.md
#   N=2000 IDLE=5 WRITE=0 scripts/idle_bench.sh    # quicker, table on stdout only
#   SERVERS="gofer-default gofer-dense" scripts/idle_bench.sh
#   GOFER=/tmp/http_server_before SERVERS=gofer-default WRITE=0 scripts/idle_bench.sh
#   GOFER_FLAGS="--park-idle 1" SERVERS=gofer-flags WRITE=0 scripts/idle_bench.sh
#
# The table goes to stdout and, unless WRITE=0, into BENCHMARKS.md between
# the `idle-bench` markers (section "Idle connections", appended when the
# markers are missing); nothing else in the file changes. Per-thread CPU of
# each server over the idle window goes to target/gofer-bench/idle-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-10000}"                 # connections held
IDLE="${IDLE:-10}"              # seconds of idle CPU measured
SETTLE="${SETTLE:-2}"           # seconds after the last first response, before measuring
SERVER_THREADS="${SERVER_THREADS:-2}"
WRITE="${WRITE:-1}"             # 1: write the table into BENCHMARKS.md
SERVERS="${SERVERS:-gofer-default gofer-dense gofer-park tokio may hyper go}"

target="${CARGO_TARGET_DIR:-target}"
out="$target/gofer-bench"
mkdir -p "$out"
hz=$(getconf CLK_TCK)
load() { cut -d' ' -f1-3 /proc/loadavg; }

# --- open files ----------------------------------------------------------------
# The server and the client each hold N sockets (plus a few): each process
# has its own limit, so N = 10,000 fits under a hard limit of 20,000.
need=$((N + 64))
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
    echo "error: open-file limit $(ulimit -n) is below the $need each process needs; lower N" >&2
    exit 1
fi
# The client's N ephemeral ports (a 10,000-port slice of the default range).
range=$(awk '{ print $2 - $1 + 1 }' /proc/sys/net/ipv4/ip_local_port_range)
if [ "$range" -lt "$N" ]; then
    echo "error: only $range local ports (ip_local_port_range) for $N connections" >&2
    exit 1
fi

# --- build first, so compiling does not load the machine while measuring ------
cargo build -p gofer -p gofer-bench --release --quiet --example idle_client --example http_server \
    --example peer_http_tokio --example peer_http_may --example peer_http_hyper

# Go's net/http hello server, built in a temporary directory when `go` is
# there (Debian: apt-get install golang); skipped otherwise.
gobin=""
if [[ " $SERVERS " == *" go "* ]]; then
    if command -v go >/dev/null 2>&1; then
        godir=$(mktemp -d)
        cat >"$godir/main.go" <<'EOF'
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HOST:PORT")
	threads := flag.Int("threads", 0, "GOMAXPROCS; 0: one per CPU")
	idle := flag.Int("idle-timeout", 60, "seconds")
	flag.Parse()
	if *threads > 0 {
		runtime.GOMAXPROCS(*threads)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	hello := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("Hello, World!"))
	}
	t := time.Duration(*idle) * time.Second
	srv := &http.Server{Handler: http.HandlerFunc(hello), IdleTimeout: t, ReadTimeout: t}
	fmt.Fprintln(os.Stderr, srv.Serve(ln))
	os.Exit(1)
}
EOF
        if (cd "$godir" && GOCACHE="$godir/cache" GO111MODULE=off go build -o http_go main.go) \
            >"$out/idle-go-build.log" 2>&1; then
            gobin="$godir/http_go"
            gover=$(go version | awk '{ print $3 }')
        else
            echo "== go build failed (see $out/idle-go-build.log): Go skipped"
        fi
    else
        echo "== go is not on PATH (apt-get install golang): Go skipped"
    fi
fi

# --- processes -----------------------------------------------------------------
pids=()
tmp=$(mktemp -d)
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp" ${godir:+"$godir"}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
# Per-thread CPU time in nanoseconds (the first field of schedstat, finer
# than the clock ticks of stat): "TID NAME NS" lines.
thread_ns() {
    local t name
    for t in /proc/"$1"/task/*; do
        name=$(cat "$t/comm" 2>/dev/null) || continue
        echo "${t##*/} ${name// /_} $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null || echo 0)"
    done
}

# wait_line FILE REGEX PID SECS: waits until FILE has a line matching REGEX.
wait_line() {
    for _ in $(seq $(($4 * 20))); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.05
    done
    grep -qE "$2" "$1" 2>/dev/null
}

# measure NAME SETTINGS CMD...: one row of the table.
rows=()
measure() {
    local name=$1 settings=$2
    shift 2
    local slog="$out/idle-$name.server.log" clog="$out/idle-$name.client.log"
    local tlog="$out/idle-$name.log"
    "$@" --addr 127.0.0.1:0 --threads "$SERVER_THREADS" >"$slog" 2>&1 &
    local spid=$!
    pids+=("$spid")
    if ! wait_line "$slog" '^listening on [^ ]+:[0-9]+$' "$spid" 10; then
        echo "error: $name did not print 'listening on ADDR':" >&2
        cat "$slog" >&2
        exit 1
    fi
    local addr
    addr=$(sed -n '1s/^listening on //p' "$slog")
    sleep 0.5
    local rss0
    rss0=$(rss_kib "$spid")

    local fifo="$tmp/wake-${#rows[@]}"
    mkfifo "$fifo"
    "$target/release/examples/idle_client" --addr "$addr" --connections "$N" \
        --wait-stdin <"$fifo" >"$clog" 2>&1 &
    local cpid=$!
    pids+=("$cpid")
    exec 3>"$fifo" # the client's stdin stays open until we write to it
    if ! wait_line "$clog" '^idle$' "$cpid" $((60 + N / 100)); then
        echo "error: the client did not get to idle against $name:" >&2
        cat "$clog" >&2
        exit 1
    fi
    sleep "$SETTLE"
    local cpu0 cpu1 rss1
    thread_ns "$spid" >"$tmp/t0"
    cpu0=$(ticks "$spid")
    sleep "$IDLE"
    cpu1=$(ticks "$spid")
    thread_ns "$spid" >"$tmp/t1"
    rss1=$(rss_kib "$spid")
    echo wake >&3
    exec 3>&-
    wait "$cpid" || true
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true

    {
        echo "$name ($settings): $(head -1 "$clog")"
        echo "RSS before $rss0 KiB, idle with $N connections $rss1 KiB"
        echo "CPU over ${IDLE} s of idle: $((cpu1 - cpu0)) clock ticks (utime + stime, $hz per s); per thread, µs:"
        awk 'NR == FNR { t0[$1] = $3; next } { printf "  %s %s %.0f\n", $1, $2, ($3 - t0[$1]) / 1000 }' \
            "$tmp/t0" "$tmp/t1"
        tail -1 "$clog"
    } >"$tlog"

    local served woke all p99 per cpu
    served=$(sed -n 's/^served \([0-9]*\) of.*/\1/p' "$clog")
    woke=$(sed -n 's/^woke \([0-9]*\) of.*/\1/p' "$clog")
    all=$(sed -n 's/^woke .* in \([0-9.]*\) ms .*/\1/p' "$clog")
    p99=$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' "$clog")
    per=$(awk -v a="$rss0" -v b="$rss1" -v n="$N" 'BEGIN { printf "%.2f", (b - a) / n }')
    # Threads that ended during the window are not counted; new ones are
    # counted from 0.
    cpu=$(awk -v s="$IDLE" 'NR == FNR { t0[$1] = $3; next } { d += $3 - t0[$1] }
        END { printf "%.3f", 100 * d / 1e9 / s }' "$tmp/t0" "$tmp/t1")
    local row
    row="| $name | $settings | ${served:-0} | $(awk -v k="$rss0" 'BEGIN { printf "%.1f", k / 1024 }') MiB | $(awk -v k="$rss1" 'BEGIN { printf "%.1f", k / 1024 }') MiB | **$per KiB** | $cpu % | ${woke:-0} | ${all:-–} ms | ${p99:-–} ms | $(cut -d' ' -f1 /proc/loadavg) |"
    rows+=("$row")
    echo "$row"
}

gofer="${GOFER:-$target/release/examples/http_server}"   # GOFER=path: another build
start_load=$(load)
start_time=$(date -u '+%Y-%m-%d %H:%M UTC')
echo "== $N idle keep-alive connections per server, ${IDLE} s idle, $SERVER_THREADS server threads"
echo "== load average before: $start_load"
header="| server | settings | served | RSS before | RSS idle | per connection | idle CPU (% of a core) | answered on wake | all answered in | p99 | load (1 min) |"
echo "$header"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in $SERVERS; do
    case $s in
    gofer-default) measure gofer-default "defaults: 256 KiB guarded stacks" "$gofer" ;;
    gofer-dense) measure gofer-dense "--dense-stacks --stack-size 16" "$gofer" --dense-stacks --stack-size 16 ;;
    gofer-flags)
        # shellcheck disable=SC2086 # GOFER_FLAGS is a list of flags
        measure gofer-flags "${GOFER_FLAGS:-}" "$gofer" ${GOFER_FLAGS:-}
        ;;
    gofer-park) measure gofer-park "--park-idle 1 --stack-cache 0" "$gofer" --park-idle 1 --stack-cache 0 ;;
    tokio) measure tokio "peer_http_tokio" "$target/release/examples/peer_http_tokio" ;;
    may) measure may "peer_http_may" "$target/release/examples/peer_http_may" ;;
    hyper) measure hyper "peer_http_hyper" "$target/release/examples/peer_http_hyper" ;;
    go)
        if [ -n "$gobin" ]; then
            measure go "net/http, $gover" "$gobin"
        fi
        ;;
    *)
        echo "error: unknown server $s" >&2
        exit 2
        ;;
    esac
done
end_load=$(load)
echo "== load average after: $end_load"

[ "$WRITE" = 1 ] || exit 0
table=$(
    echo "Run: $start_time, N = $N connections, ${IDLE} s idle, $SERVER_THREADS server threads,"
    echo "$(nproc) CPUs; load average before $start_load, after $end_load (\`scripts/idle_bench.sh\`)."
    echo
    echo "$header"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
)
printf '<!-- generated by scripts/idle_bench.sh -->\n%s\n' "$table" |
    python3 scripts/md_section.py idle-bench "Idle connections"
