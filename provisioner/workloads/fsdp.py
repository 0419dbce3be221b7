"""FSDP smoke training (FSDP2 ``fully_shard``), one process per node.

Proves: parameters are really sharded (each rank holds about 1/world of every weight,
and the shards add up to the whole model), loss goes down, and a
torch.distributed.checkpoint save is reloaded into a fresh sharded model with
identical values. Run by torchrun.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import _common as c


def build(device) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    model.to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def shard_facts(model: nn.Module) -> dict:
    local = full = 0
    dtensors = 0
    params = 0
    for p in model.parameters():
        params += 1
        if isinstance(p, DTensor):
            dtensors += 1
            local += p.to_local().numel()
            full += p.numel()
        else:
            local += p.numel()
            full += p.numel()
    return {"params": params, "dtensor_params": dtensors, "local_numel": local, "full_numel": full}


def main() -> None:
    t0 = time.time()
    steps = int(os.environ.get("SIMCLUSTER_STEPS", "30"))
    ckpt_dir = os.environ.get("SIMCLUSTER_CKPT_DIR") or os.path.join(os.getcwd(), "fsdp_ckpt")
    dev = c.pick_device()
    device = dev["device"]
    c.init(dev["backend"])
    rank, world = c.dist.get_rank(), c.dist.get_world_size()
    where = c.placement()

    model = build(device)
    facts = c.gather(shard_facts(model))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = c.train_regression(c.plain_step(model, opt), rank, steps, 64, device)

    # Distributed checkpoint: every rank writes its own shards, then a fresh model loads them.
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=ckpt_dir)
    fresh = build(device)
    state = {"model": get_model_state_dict(fresh)}
    dcp.load(state, checkpoint_id=ckpt_dir)
    set_model_state_dict(fresh, state["model"])
    trained = [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]
    loaded = [p.to_local() if isinstance(p, DTensor) else p for p in fresh.parameters()]
    same = all(torch.equal(a.detach().cpu(), b.detach().cpu()) for a, b in zip(trained, loaded))
    reload_ok = all(c.gather(bool(same)))
    files = sorted(os.listdir(ckpt_dir)) if rank == 0 else []

    c.emit({
        "workload": "fsdp", "api": "fully_shard", "world_size": world, "backend": dev["backend"],
        "device": str(device.type), "steps": steps, "loss_first": losses[0], "loss_last": losses[-1],
        "shards": facts, "checkpoint_dir": ckpt_dir, "checkpoint_files": files,
        "checkpoint_reloaded": reload_ok, "placement": where, "seconds": round(time.time() - t0, 2),
    })
    c.finish()


if __name__ == "__main__":
    main()
