#!/usr/bin/env bash
# Runs every bench in sequence, then scripts/plot.py, which redraws
# docs/bench/*.svg and rewrites the generated section of BENCHMARKS.md.
#
#   scripts/bench.sh              # everything (about 5 minutes plus the build)
#   scripts/bench.sh core chan    # only these benches, then the plots
#
# Run it on a quiet machine: the figures are only as good as the idle CPUs.
# The million bench needs about 5 GiB of free memory.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(core chan sync throughput throughput_may1 throughput_may2 blocking million)
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=("${all[@]}")

target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target/gofer-bench"
env_file="$target/gofer-bench/run.env"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# Build everything first so that compiling does not load the machine while
# a bench measures.
cargo bench -p gofer-bench --no-run

# A partial run keeps the previous run's record, since the figures of the
# benches it skips come from there.
if [ -f "$env_file" ] && [ "${benches[*]}" != "${all[*]}" ]; then
    mv "$env_file" "$target/gofer-bench/run-previous.env"
fi
{
    echo "started=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "load_before=$(load)"
    echo "benches=${benches[*]}"
} >"$env_file"
echo "== load average before: $(load)"

failed=()
for b in "${benches[@]}"; do
    echo "== cargo bench -p gofer-bench --bench $b"
    cargo bench -p gofer-bench --bench "$b" || failed+=("$b")
done

{
    echo "finished=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "load_after=$(load)"
} >>"$env_file"
echo "== load average after: $(load)"

python3 scripts/plot.py

if [ ${#failed[@]} -gt 0 ]; then
    echo "== failed: ${failed[*]}" >&2
    exit 1
fi
