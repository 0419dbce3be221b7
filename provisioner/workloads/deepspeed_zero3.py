"""DeepSpeed ZeRO-3 smoke training, one process per node, started by srun directly.

This is DeepSpeed launched without a launcher: `srun python train.py`, with RANK/WORLD_SIZE/
LOCAL_RANK taken from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Proves: ZeRO stage 3 is
active and every parameter is partitioned (each rank holds only its slice), and loss
goes down.

Two things keep it fast on CPU: the `deepspeed_shm_comm` op builder is skipped (DeepSpeed
JIT-compiles it on every init_distributed, 40-90 s; gloo does the same work), and the
optimizer is torch's AdamW (DeepSpeed's own Adam would be compiled too).
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn as nn

import _common as c

c.env_from_slurm()
CUDA = torch.cuda.is_available() and torch.cuda.device_count() > 0


def _skip_shm_comm_build() -> None:
    """Mark DeepSpeed's shared-memory allreduce op incompatible so it is never compiled."""
    # lazy: deepspeed is imported only after its shm op is disabled (see main)
    import deepspeed.ops
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def main() -> None:
    t0 = time.time()
    if not CUDA:
        _skip_shm_comm_build()
    import deepspeed  # lazy: after _skip_shm_comm_build, so the shm op is never compiled

    steps = int(os.environ.get("SIMCLUSTER_STEPS", "30"))
    dev = c.pick_device()
    device = dev["device"]
    deepspeed.init_distributed(dist_backend=dev["backend"], timeout=__import__("datetime").timedelta(seconds=120))
    rank, world = c.dist.get_rank(), c.dist.get_world_size()
    where = c.placement()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    config = {
        "train_micro_batch_size_per_gpu": 32,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "fp16": {"enabled": False},
        "bf16": {"enabled": False},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)

    facts = []
    for p in engine.module.parameters():
        facts.append({"full": int(getattr(p, "ds_numel", p.numel())),
                      "local": int(p.ds_tensor.numel()) if hasattr(p, "ds_tensor") else int(p.numel())})
    shard = {"params": len(facts), "partitioned": sum(1 for f in facts if f["local"] < f["full"]),
             "local_numel": sum(f["local"] for f in facts), "full_numel": sum(f["full"] for f in facts)}

    def step(x, y):
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        return loss
    losses = c.train_regression(step, rank, steps, 32, device)

    c.emit({
        "workload": "deepspeed", "zero_stage": engine.zero_optimization_stage(), "world_size": world,
        "backend": dev["backend"], "device": str(device.type), "deepspeed": deepspeed.__version__,
        "steps": steps, "loss_first": losses[0], "loss_last": losses[-1],
        "shards": c.gather(shard), "placement": where, "seconds": round(time.time() - t0, 2),
    })
    c.finish()


if __name__ == "__main__":
    main()
