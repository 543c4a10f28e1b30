"""Guide chapter 1: the same machine description from Python (docs/guide/01-discover.md)."""

import accel

here = accel.discover()  # this machine; accel.discover(root="capture/") reads a captured one
print(f"this machine: {len(here['numa_nodes'])} NUMA nodes, {len(here['accelerators'])} accelerators")

m = accel.sample("dgx-h100")  # a captured DGX H100 embedded in the package
for acc in m["accelerators"]:
    print(f"{acc['vendor']}{acc['index']}  {acc['product']:<32} pci {acc['pci']}  numa {acc['numa_node']}  "
          f"{acc['memory_bytes'] >> 30} GiB")
# Scale-up links: NVSwitch joins every pair with 18 NVLinks.
pairs = {(link["a"], link["b"]): link for link in m["links"]}
first = m["accelerators"][0]["id"]
peers = sorted(b for (a, b) in pairs if a == first)
print(f"{first} has {len(peers)} NVLink peers; kind {pairs[(first, peers[0])]['kind']}, "
      f"{pairs[(first, peers[0])]['count']} links, {pairs[(first, peers[0])]['gbps']} GB/s")
assert len(m["accelerators"]) == 8 and len(peers) == 7
