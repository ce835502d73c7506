#!/usr/bin/env bash
# Cold bursts of connections, each in a fresh process, and how many of them
# the Dispatcher counted a blocked Processer in (BENCHMARKS.md, "Cold
# bursts"). For each scenario (net: 2,000 gofer::net connections; hooks:
# 1,000 tasks on std's TcpStream, built with the hooks feature) it runs
# RUNS fresh processes with the descriptor table left to grow
# (--reserve 0) and RUNS with the scheduler's default reserve.
#
#   scripts/cold_burst.sh [RUNS]      (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
target="${CARGO_TARGET_DIR:-target}"
cargo build -p gofer-bench --release --example cold_burst -q
cp "$target/release/examples/cold_burst" "$target/release/examples/cold_burst_plain"
cargo build -p gofer-bench --release --features hooks --example cold_burst -q
hooked="$target/release/examples/cold_burst"
plain="$target/release/examples/cold_burst_plain"

for scenario in net hooks; do
    bin="$plain"
    [ "$scenario" = hooks ] && bin="$hooked"
    for reserve in 0 default; do
        flag=()
        [ "$reserve" = default ] || flag=(--reserve "$reserve")
        counted=0 total=0 ms=()
        for _ in $(seq "$runs"); do
            line=$(timeout 120 "$bin" --scenario "$scenario" "${flag[@]}")
            n=$(awk '{print $2}' <<<"$line")
            ms+=("$(awk '{print $8}' <<<"$line")")
            total=$((total + n))
            [ "$n" -gt 0 ] && counted=$((counted + 1))
        done
        sorted=$(printf '%s\n' "${ms[@]}" | sort -n | tr '\n' ' ')
        echo "$scenario reserve=$reserve: $counted of $runs runs counted a blocked Processer ($total detections); run times (ms): $sorted"
    done
done
