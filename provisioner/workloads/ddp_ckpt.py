"""DDP training that survives losing a node: checkpoint, requeue, resume, same result.

Used by `verify --suite faults` (faults.requeue-resume). Every rank starts from the same
seed; the batch of step i on rank r is drawn from a generator seeded with (seed, i, r),
so the data order does not depend on how many steps a process has already run. Every
SIMCLUSTER_CKPT_EVERY steps rank 0 writes model + optimizer (momentum buffers) + step to
SIMCLUSTER_CKPT_DIR (written to a temporary name, then renamed: a node killed mid-write
never leaves a half checkpoint). When SLURM_RESTART_COUNT > 0 (the job was requeued)
every rank loads the latest checkpoint and goes on from the step after it.

Resumed or not, the same seed gives bit-identical parameters at the end: gloo's
all-reduce over 2 ranks adds the same two numbers in the same order, and the
checkpoint restores every float exactly. Rank 0 prints the final parameter checksum.
SIMCLUSTER_STEP_SLEEP (seconds per step) stretches the run so a fault can land mid-training.
"""

from __future__ import annotations

import glob
import os
import time

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import _common as c


def latest_checkpoint(ckpt_dir: str):
    found = sorted(glob.glob(os.path.join(ckpt_dir, "step-*.pt")),
                   key=lambda p: int(os.path.basename(p)[5:-3]))
    return found[-1] if found else None


def main() -> None:
    t0 = time.time()
    steps = int(os.environ.get("SIMCLUSTER_STEPS", "40"))
    every = int(os.environ.get("SIMCLUSTER_CKPT_EVERY", "5"))
    pause = float(os.environ.get("SIMCLUSTER_STEP_SLEEP", "0.3"))
    seed = int(os.environ.get("SIMCLUSTER_SEED", "1234"))
    ckpt_dir = os.environ["SIMCLUSTER_CKPT_DIR"]
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    dev = c.pick_device()
    device = dev["device"]
    c.init(dev["backend"], timeout_s=60)
    rank, world = c.dist.get_rank(), c.dist.get_world_size()
    where = c.placement()
    if dev["cuda"]:
        torch.backends.cudnn.deterministic = True

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start, resumed_from = 0, None
    if restarts > 0:
        path = latest_checkpoint(ckpt_dir)
        if path:
            state = torch.load(path, map_location=device)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start = resumed_from = state["step"]
            c.log(f"restart {restarts}: resumed from {path} (step {start})")
        else:
            c.log(f"restart {restarts}: no checkpoint yet, starting over")
    ddp = DDP(model, device_ids=[device.index] if dev["cuda"] else None)
    w_true = torch.randn(16, 1, generator=torch.Generator().manual_seed(7))
    losses = []
    for i in range(start, steps):
        gen = torch.Generator().manual_seed(seed * 100003 + i * 101 + rank)
        x = torch.randn(32, 16, generator=gen)
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), (x @ w_true).to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(c.mean_across_ranks(loss.item(), device))
        done = i + 1
        if rank == 0 and done % every == 0 and done < steps:
            os.makedirs(ckpt_dir, exist_ok=True)
            tmp = os.path.join(ckpt_dir, f".step-{done}.tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done}, tmp)
            os.replace(tmp, os.path.join(ckpt_dir, f"step-{done}.pt"))
            c.log(f"checkpoint at step {done}")
        time.sleep(pause)

    sums = c.gather(c.checksum([p for p in model.parameters()]))
    raw = c.gather([p.detach().cpu().double().sum().item() for p in model.parameters()])
    c.emit({
        "workload": "ddp_ckpt", "world_size": world, "backend": dev["backend"], "device": str(device.type),
        "steps": steps, "restart_count": restarts, "resumed_from": resumed_from,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "param_checksum": sums[0], "param_checksums": sums, "param_sums": raw[0],
        "params_identical": len(set(sums)) == 1, "placement": where, "seconds": round(time.time() - t0, 2),
    })
    c.finish()


if __name__ == "__main__":
    main()
