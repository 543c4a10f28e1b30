#!/usr/bin/env bash
# Fuzzes accel for a short while (issue 17): the transport's frame, handshake and record parsing
# (target `frame`), external plugins' answers (`plugin_answer`) and discovery over captured
# machines (`capture`); fuzz/README.md says what each feeds and checks. First a canary run proves
# that a planted panic is found and reported; then each target runs for ACCEL_FUZZ_SECONDS,
# starting from its committed seeds (fuzz/seeds/<target>, regression inputs included) and the
# corpus earlier runs grew (fuzz/corpus/<target>). Exits non-zero if any target crashed, hung
# (10 s on one input) or ran away with memory, printing the input that did it.
#
# Stable Rust, and no RUSTC_BOOTSTRAP: cargo-fuzz needs nightly only for its sanitizers (its
# default `-Zsanitizer=address`) and `-Zbuild-std`. With `--sanitizer none` every flag it passes
# to rustc is stable (`-Cpasses=sancov-module`, `-Cllvm-args=-sanitizer-coverage-*`,
# `--cfg fuzzing`), and libfuzzer-sys compiles libFuzzer with the system C++ compiler. What
# AddressSanitizer would add for safe Rust is small (bounds are checked anyway); its allocator
# limits are replaced by a bounded global allocator in the harness (fuzz/src/lib.rs: past 256 MiB
# live an allocation fails and the process aborts, which libFuzzer records as a crash) and
# libFuzzer's -rss_limit_mb. `-a` turns debug assertions on, so integer overflow panics too.
#
# Usage: scripts/fuzz.sh [TARGET...]     (default: frame plugin_answer capture)
# Environment:
#   ACCEL_FUZZ_SECONDS=60      seconds of fuzzing per target
#   ACCEL_FUZZ_CANARY_CHECK=0  skip the canary run
#   ACCEL_FUZZ_STRICT=1        also check the model's invariants and the differential properties
#                              (findings to read, not a CI gate: fuzz/README.md)
# Nothing is left outside fuzz/ (gitignored there: target/, corpus/, artifacts/): TMPDIR and the
# capture target's scratch trees point into fuzz/target/ while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${ACCEL_FUZZ_SECONDS:-60}
if (($#)); then targets=("$@"); else targets=(frame plugin_answer capture); fi

export TMPDIR="$PWD/fuzz/target/tmp"
export ACCEL_FUZZ_SCRATCH="$PWD/fuzz/target/scratch"
mkdir -p "$TMPDIR" "$ACCEL_FUZZ_SCRATCH" fuzz/target/logs
trap 'rm -rf "$TMPDIR" "$ACCEL_FUZZ_SCRATCH" fuzz/target/canary' EXIT

# Flags shared by build and run, so `cargo fuzz run` reuses the build.
fuzz_flags=(--fuzz-dir fuzz --sanitizer none --debug-assertions)
# Largest input per target: frames and answers of a few KiB, bundles up to the seeds' 10 KiB.
declare -A max_len=([frame]=8192 [plugin_answer]=16384 [capture]=16384)
start=$SECONDS

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# The fuzz crate is its own workspace, so test.sh's fmt, clippy and test leave it out: checked here.
echo "== the fuzz crate: fmt, clippy, its unit tests (the bounded allocator; trees written to disk)"
cargo fmt --manifest-path fuzz/Cargo.toml --check
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -q -- -D warnings
cargo test --manifest-path fuzz/Cargo.toml --lib -q

echo "== cargo fuzz build (stable, --sanitizer none, debug assertions)"
cargo fuzz build "${fuzz_flags[@]}"

# run TARGET SECONDS CORPUS ARTIFACTS LOG: libFuzzer over CORPUS (grown) and the seeds (read).
run() {
  local target=$1 secs=$2 corpus=$3 artifacts=$4 log=$5
  local dict=()
  [[ -f fuzz/dict/$target.dict ]] && dict=("-dict=fuzz/dict/$target.dict")
  mkdir -p "$corpus" "$artifacts"
  cargo fuzz run "${fuzz_flags[@]}" "$target" "$corpus" "fuzz/seeds/$target" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$target]}" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
}

if [[ ${ACCEL_FUZZ_CANARY_CHECK:-1} != 0 ]]; then
  echo "== canary: the frame target with its planted panic armed must crash within 120 s"
  canary=fuzz/target/canary
  rm -rf "$canary"
  t=$SECONDS
  if ACCEL_FUZZ_CANARY=1 run frame 120 "$canary/corpus" "$canary/artifacts" fuzz/target/logs/canary.log; then
    echo "error: the canary was not reported: a crash in a fuzz target would go unnoticed" >&2
    exit 1
  fi
  found=$(find "$canary/artifacts" -name 'crash-*' | head -1)
  if [[ -z $found ]] || ! grep -q 'accel-fuzz canary' fuzz/target/logs/canary.log; then
    echo "error: the canary run failed without the canary's crash; log: fuzz/target/logs/canary.log" >&2
    tail -20 fuzz/target/logs/canary.log >&2
    exit 1
  fi
  echo "   caught in $((SECONDS - t)) s: $(grep -m1 'accel-fuzz canary' fuzz/target/logs/canary.log)"
fi

failed=()
for target in "${targets[@]}"; do
  echo "== fuzz $target for ${seconds} s"
  log=fuzz/target/logs/$target.log
  artifacts=fuzz/artifacts/$target
  before=$(mktemp)
  find "$artifacts" -type f 2>/dev/null | sort >"$before" || true
  if run "$target" "$seconds" "fuzz/corpus/$target" "$artifacts" "$log"; then
    grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$log" | tail -1 | sed 's/^/   /'
  else
    failed+=("$target")
    echo "error: fuzz target $target failed (log: $log)" >&2
    grep -m1 -A3 -E 'panicked at|ERROR: libFuzzer|memory allocation of' "$log" | sed 's/^/   /' >&2 || true
    new=$(find "$artifacts" -type f | sort | comm -13 "$before" -)
    for input in $new; do
      echo "   input: $input" >&2
      echo "   reproduce: cargo fuzz run ${fuzz_flags[*]} $target $input" >&2
    done
    [[ -n $new ]] || tail -20 "$log" >&2
  fi
  rm -f "$before"
done

echo "== fuzzing took $((SECONDS - start)) s"
if ((${#failed[@]})); then
  echo "error: crashes in: ${failed[*]}; keep each input as fuzz/seeds/<target>/regression-<what>" >&2
  exit 1
fi
