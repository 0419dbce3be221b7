"""DistributedDataParallel smoke training: a tiny MLP, one process per node.

Proves: every rank joined one process group across nodes, gradients were all-reduced
(loss goes down on data each rank only partly sees), and the parameters are identical
on every rank at the end (each rank starts from a *different* random init, so equal
parameters also prove DDP's initial broadcast).
Run by torchrun (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* set by it).
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import _common as c


def main() -> None:
    t0 = time.time()
    steps = int(os.environ.get("SIMCLUSTER_STEPS", "30"))
    dev = c.pick_device()
    device = dev["device"]
    c.init(dev["backend"])
    rank, world = c.dist.get_rank(), c.dist.get_world_size()
    where = c.placement()

    torch.manual_seed(1000 + rank)  # different init per rank: DDP must broadcast rank 0's
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    ddp = DDP(model, device_ids=[device.index] if dev["cuda"] else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    losses = c.train_regression(c.plain_step(ddp, opt), rank, steps, 64, device)

    sums = c.gather(c.checksum([p for p in model.parameters()]))
    c.emit({
        "workload": "ddp", "world_size": world, "backend": dev["backend"], "device": str(device.type),
        "steps": steps, "loss_first": losses[0], "loss_last": losses[-1],
        "param_checksums": sums, "params_identical": len(set(sums)) == 1,
        "placement": where, "seconds": round(time.time() - t0, 2),
    })
    c.finish()


if __name__ == "__main__":
    main()
