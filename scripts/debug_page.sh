#!/usr/bin/env bash
# A screenshot of the live debug page (`gofer::debug::serve`) of the HTTP
# example under load, taken by headless Chromium: docs/debug_page.png.
#
#   bash scripts/debug_page.sh [SECONDS_OF_LOAD]
#
# Installs chromium and wrk with apt-get if they are missing, builds the
# http_server example, starts it on loopback with --debug-addr, loads it
# with wrk for SECONDS_OF_LOAD (default 40; the charts show a minute), and
# saves the screenshot while the load runs. Everything stays on 127.0.0.1 and
# ends with the script.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-40}
out=docs/debug_page.png
page_port=6061

need() {
    command -v "$1" >/dev/null 2>&1 && return
    echo "== installing $2"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    fi
}
need wrk wrk
need chromium chromium

echo "== building the http_server example"
cargo build --release --example http_server

log=$(mktemp)
target/release/examples/http_server --addr 127.0.0.1:0 --threads 2 \
    --debug-addr "127.0.0.1:$page_port" >"$log" 2>&1 &
server=$!
cleanup() {
    kill -INT "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -f "$log"
}
trap cleanup EXIT

for _ in $(seq 100); do
    grep -q '^debug page at' "$log" && break
    sleep 0.1
done
addr=$(sed -n 's/^listening on //p' "$log")
echo "== server at $addr, debug page at http://127.0.0.1:$page_port/"

echo "== loading it with wrk for ${secs}s (1,000 connections)"
wrk -t1 -c1000 -d"${secs}s" "http://$addr/" >/dev/null &
load=$!
# Let the charts fill while the load runs, then take the picture.
sleep $((secs * 3 / 4))
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1280,1000 --virtual-time-budget=3000 \
    --screenshot="$out" "http://127.0.0.1:$page_port/" 2>/dev/null
wait "$load" || true
echo "== saved $out ($(stat -c %s "$out") bytes)"
