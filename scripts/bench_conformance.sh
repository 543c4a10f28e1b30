#!/usr/bin/env bash
# Times a vendor's loop: `accel conformance --plugin ascend --capture examples/plugins/ascend/capture`
# (the Ascend example plugin, a Python script, on its own capture), beside the same plugin graded
# on every embedded sample as well (`--samples`: what the command did before --capture replaced
# the samples). Each is run ROUNDS times (default 5); prints min and median wall seconds, the
# binary, the Python the plugin runs with, and the load average, as docs/BENCHMARKS.md records.
#
#   bash scripts/bench_conformance.sh [ROUNDS]
#
# ACCEL is the accel binary (default: target/release/accel if built, else target/debug/accel).
# The plugin runs with the first python3 on PATH: this script puts .venv/bin first, as a user
# with the virtualenv activated has it.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
accel=${ACCEL:-$( [ -x target/release/accel ] && echo target/release/accel || echo target/debug/accel )}
export PATH="$PWD/.venv/bin:$PATH" ACCEL_PLUGIN_DIR=examples/plugins/ascend
capture=examples/plugins/ascend/capture
time_it() {
  local label=$1
  shift
  local times=()
  for _ in $(seq "$rounds"); do
    local start end
    start=$(date +%s.%N)
    "$accel" conformance --plugin ascend --capture "$capture" "$@" > /dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
  done
  printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
t = sorted(float(x) for x in sys.stdin)
print(f"{sys.argv[1]}: min {t[0]:.2f} s, median {statistics.median(t):.2f} s over {len(t)} runs")' "$label"
}
echo "binary: $accel ($("$accel" --version)); plugin python: $(command -v python3); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
time_it "--plugin ascend --capture C (the vendor's loop)"
time_it "--plugin ascend --capture C --samples (also every embedded sample)" --samples
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
