"""Guide chapter 6: resharded weight sync. A toy trainer of 4 ranks (FSDP-style: each holds a
quarter of every weight's rows, in f32) feeds 8 inference ranks (2 replicas of 4-way tensor
parallelism, Megatron's MLP split, in f16) through accel.weights (docs/guide/06-weight-sync.md).

Each inference rank computes its partial MLP output; the 4 partials of a replica sum to the
full model's output, which the driver checks against the trainer's weights after every step.
"""

from __future__ import annotations

import numpy as np
import ray

import accel.ray
from accel import weights

D_IN, HIDDEN, D_OUT = 64, 256, 16
MODEL = {"w1": ((D_IN, HIDDEN), "f32"), "w2": ((HIDDEN, D_OUT), "f32")}
# Trainer: every weight's rows split over 4 ranks. Inference: w1 by columns and w2 by rows
# (each rank holds one slice of the hidden layer), 2 replicas of 4 ranks, stored as f16.
TRAIN = weights.Layout.sharded(MODEL, ranks=4, dim=0)
SERVE = weights.Layout.sharded(MODEL, ranks=8, dim={"w1": 1, "w2": 0}, replicas=2).with_dtypes("f16")


def full_weights(step: int) -> dict[str, np.ndarray]:
    """The model after `step` toy updates (the same on every rank: a seeded drift)."""
    rng = np.random.default_rng(step)
    return {n: rng.standard_normal(shape).astype(np.float32) / np.float32(np.sqrt(shape[0])) for n, (shape, _) in MODEL.items()}


@ray.remote(num_cpus=0)
class TrainerRank(accel.ray.WeightSource):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def train_step(self, step: int) -> weights.Shipment:
        full = full_weights(step)  # a real trainer would hold only its own rows
        mine = {n: full[n][tuple(slice(lo, hi) for lo, hi in box)] for n, box in TRAIN.ranks[self.rank].items()}
        return self.publish_weights(step, mine)


@ray.remote(num_cpus=0)
class InferenceRank(accel.ray.WeightTarget):
    def forward(self, x: np.ndarray) -> tuple[int | None, np.ndarray]:
        with self.weights() as (version, w):  # the version in service, for this whole call
            hidden = np.maximum(x @ w["w1"].astype(np.float32), 0.0)
            return version, hidden @ w["w2"].astype(np.float32)  # this rank's partial output


# A private local cluster: address="local" never attaches to a cluster already running here.
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
try:
    trainers = [TrainerRank.remote(r) for r in range(4)]
    servers = [InferenceRank.remote() for _ in range(8)]
    plan = accel.ray.plan_weight_sync(TRAIN, trainers, SERVE, servers)  # once
    print(f"plan: {plan.bytes} bytes per sync, planned in {plan.seconds * 1e3:.2f} ms")
    x = np.random.default_rng(0).standard_normal((4, D_IN)).astype(np.float32)
    for step in range(1, 4):
        report = accel.ray.sync_weights(plan, [t.train_step.remote(step) for t in trainers], servers)
        outs = ray.get([s.forward.remote(x) for s in servers])
        assert {v for v, _ in outs} == {step}, outs
        w = full_weights(step)
        want = np.maximum(x @ w["w1"], 0.0) @ w["w2"]
        for replica in (0, 1):  # ranks r and r + 4 hold the same slice: two replicas
            got = sum(outs[r + 4 * replica][1] for r in range(4))
            np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)  # f16 weights
        print(
            f"step {step}: {report.nbytes} bytes to 8 ranks in {report.total * 1e3:.1f} ms, "
            f"pause {report.pause * 1e3:.2f} ms; both replicas match the trainer's model"
        )
finally:
    ray.shutdown()
