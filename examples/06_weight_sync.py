"""Guide chapter 6: weight sync from a trainer to inference workers through a channel
(docs/guide/06-weight-sync.md)."""

from __future__ import annotations

import numpy as np
import ray

import accel.ray
from accel import transport

accel.ray.register_transport()


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self) -> None:
        self.ch = transport.channel("policy")

    def channel(self) -> transport.Channel:
        return self.ch  # about 200 bytes when pickled: the name and the producer's endpoint

    def step(self, value: float) -> int:
        w = self.ch.empty((1024, 1024), "f4")  # pooled shared memory: publish copies nothing
        w[...] = value
        return self.ch.publish({"w": w, "b": np.full(16, value, np.float32)})


@ray.remote(num_cpus=0)
class InferenceWorker:
    def __init__(self, ch: transport.Channel) -> None:
        self.ch = ch

    def sync(self) -> tuple[int, float, float]:
        # The newest complete version; the views are released when the block ends.
        with self.ch.read() as (version, tensors):
            return version, float(tensors["w"][0, 0]), float(tensors["b"].sum())


# A private local cluster: address="local" never attaches to a cluster already running here.
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    trainer = Trainer.remote()
    ch = ray.get(trainer.channel.remote(), timeout=120)
    workers = [InferenceWorker.remote(ch) for _ in range(2)]
    for step in range(1, 4):
        version = ray.get(trainer.step.remote(float(step)), timeout=120)
        for seen, w00, bsum in ray.get([w.sync.remote() for w in workers], timeout=120):
            assert (seen, w00, bsum) == (version, float(step), 16.0 * step), (seen, w00, bsum)
        print(f"step {step}: version {version} read by {len(workers)} workers")
finally:
    ray.shutdown()
