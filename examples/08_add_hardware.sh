#!/usr/bin/env bash
# Guide chapter 8: add hardware accel does not know, with data and a plugin and no rebuild
# (docs/guide/08-add-hardware.md). The machine is examples/plugins/ascend/capture, a synthetic
# Atlas 800T A2 (eight Huawei Ascend 910B NPUs; its README names the sources).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
capture="$here/plugins/ascend/capture"

# 1. Without help, accel sees eight unknown PCI accelerators (the generic fallback, `ACC`).
accel topo --root "$capture" > topo-before.txt
grep -E '^ +ACC0:' topo-before.txt

# 2. A SKU file names the device: PCI ids, product facts and a public source. Data only.
cat > my-skus.toml <<'TOML'
[[sku]]
id = "huawei-ascend-910b"
vendor = "huawei"
product = "Huawei Ascend 910B"
family = "ascend"
memory_bytes = 68719476736
dtypes = ["fp32", "fp16", "bf16", "int8"]
ray_accelerator_type = "Ascend910B"
sources = ["https://e.huawei.com/en/products/computing/ascend/atlas-800t-a2"]
[[sku.pci]]
vendor = 0x19e5
device = 0xd802
TOML
accel topo --root "$capture" --sku-file my-skus.toml | grep -E '^ +ACC0:'
accel discover --root "$capture" --sku-file my-skus.toml --json > with-sku.json
python3 - <<'PY'
import json
m = json.load(open("with-sku.json"))
skus = {a.get("sku") for a in m["accelerators"]}
print("with the SKU file:", len(m["accelerators"]), "devices, sku", skus)
assert skus == {"huawei-ascend-910b"}, skus
PY

# 3. A plugin adds the whole family: an executable `accel-plugin-<name>` speaking JSON.
export ACCEL_PLUGIN_DIR="$here/plugins/ascend"
accel topo --root "$capture" > topo-after.txt
grep -E '^ +NPU0:|^NPU0 ' topo-after.txt
accel discover --root "$capture" --json > with-plugin.json
python3 - <<'PY'
import json
m = json.load(open("with-plugin.json"))
npu = [a for a in m["accelerators"] if a["vocabulary"].get("label") == "NPU"]
v = npu[0]["vocabulary"]
print(len(npu), "NPUs:", v["visibility_env"], v["ray_resource"], v["device_files"])
assert len(npu) == 8 and v["device_files"] == ["/dev/davinci0"], v
PY

# 4. Grade the plugin on the capture (exit status 1 if any check fails), as JSON.
accel conformance --plugin ascend --capture "$capture" --json > conformance.json
python3 - <<'PY'
import json
plugin = json.load(open("conformance.json"))["plugins"][0]
checks = [c for cap in plugin["captures"] for c in cap["checks"]]
print(plugin["name"], {k: v["tier"] for k, v in sorted(plugin["tiers"].items())},
      sum(c["status"] == "pass" for c in checks), "of", len(checks), "checks pass")
assert not [c for c in checks if c["status"] == "fail"], checks
PY
