"""Guide chapter 4: move tensors with accel.transport (docs/guide/04-transport.md)."""

import numpy as np
import ray

import accel.ray
from accel import transport

# In one process: publish a buffer, pass the small reference around, read it back.
buf = transport.empty((1024, 1024), "f4")  # pooled shared memory: write in place, no copy at put
buf[:] = 1.5
ref = transport.put(buf)
print("reference:", ref.chosen_path, ref.shape, ref.dtype)
arr = transport.get(ref)
assert float(arr.sum()) == 1.5 * 1024 * 1024
transport.free(ref)

# Through Ray: register before defining the actors, then return arrays with tensor_transport="ACCEL".
accel.ray.register_transport()


@ray.remote(num_cpus=0)
class Producer:
    @ray.method(tensor_transport="ACCEL")
    def weights(self):
        return {"w": np.full((512, 512), 2.0, np.float32)}


@ray.remote(num_cpus=0)
class Consumer:
    def total(self, weights):
        return float(weights["w"].sum())


# A private local cluster: address="local" never attaches to a cluster already running here.
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    producer, consumer = Producer.remote(), Consumer.remote()
    total = ray.get(consumer.total.remote(producer.weights.remote()), timeout=120)
    print("consumer read", total)
    assert total == 2.0 * 512 * 512
finally:
    ray.shutdown()
