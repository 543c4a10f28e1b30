#!/usr/bin/env bash
# The vendor conformance runner: the same command on a vendor's self-hosted runner
# (ci/vendor-conformance.yml) and in this repository's tests (crates/cli/tests/conformance.rs).
#
#   scripts/vendor-conformance.sh OUT.json [accel conformance arguments...]
#
# Writes the suite's JSON report (with the environment fingerprint when --live is given) to
# OUT.json, prints the tier table, and exits with the suite's status: 0 every check passes,
# 1 a check fails, 2 bad arguments. ACCEL is the accel binary (default: accel on PATH).
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT.json [accel conformance arguments...]" >&2
  exit 2
fi
out=$1
shift
accel=${ACCEL:-accel}
"$accel" conformance --json "$@" > "$out"
status=$?
if [ $status -le 1 ] && [ -s "$out" ]; then
  "$accel" env --json > "${out%.json}.env.json" || true
  python3 - "$out" <<'PY' || true
import json, sys
report = json.load(open(sys.argv[1]))
print(f"{'plugin':<14}{'discover':<10}{'topology':<10}{'isolate':<9}{'metrics':<9}captures")
for p in report["plugins"]:
    t = {c: p["tiers"].get(c, {}).get("tier", "none") for c in ("discover", "topology", "isolate", "metrics")}
    print(f"{p['name']:<14}{t['discover']:<10}{t['topology']:<10}{t['isolate']:<9}{t['metrics']:<9}{len(p['captures'])}")
    for c in p["captures"]:
        for k in c["checks"]:
            if k["status"] == "fail":
                print(f"  FAIL {k['name']} on {c['capture']}: {k['detail']}")
PY
fi
exit $status
