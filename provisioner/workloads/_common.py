"""Helpers shared by the training workloads `simcluster verify` submits.

The workloads run inside Slurm jobs, one process per node, started by torchrun or
directly by srun. They import this file from their own directory (it is on sys.path
as the script's directory), never from the simcluster package: a job needs nothing but
torch and the training stack it tests.

Each workload ends with rank 0 printing one machine-readable line,
``SIMCLUSTER_RESULT {json}``, that verify parses (loss first/last, sharding facts,
parameter checksums, the device and backend that were used).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
import warnings
from typing import Dict, List

import torch
import torch.distributed as dist

RESULT_PREFIX = "SIMCLUSTER_RESULT "

# torch warns on every collective DeepSpeed calls by its old name: noise in the job output.
warnings.filterwarnings("ignore", category=FutureWarning)


def log(msg: str) -> None:
    """One line to stdout, prefixed with the rank (stdout of all ranks goes to one file)."""
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "?"))
    print(f"[rank {rank}] {msg}", flush=True)


def pick_device() -> Dict[str, object]:
    """CUDA + NCCL when this process sees a GPU, else CPU + gloo."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return {"device": torch.device("cuda", index), "backend": "nccl", "cuda": True}
    return {"device": torch.device("cpu"), "backend": "gloo", "cuda": False}


def env_from_slurm() -> None:
    """RANK/WORLD_SIZE/LOCAL_RANK from Slurm when the process was started by srun directly.

    torchrun sets them itself; `srun python train.py` (DeepSpeed without a launcher) does not.
    """
    defaults = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}
    for var, slurm_var in defaults.items():
        if var not in os.environ and slurm_var in os.environ:
            os.environ[var] = os.environ[slurm_var]


def init(backend: str, timeout_s: float = 120.0) -> None:
    """init_process_group with a bounded timeout: a lost peer fails the job, never hangs it."""
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))


def placement() -> List[Dict[str, str]]:
    """Where every rank runs: Slurm node, host, GPUs it sees (gathered to all ranks)."""
    me = {
        "rank": dist.get_rank(),
        "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "pid": os.getpid(),
    }
    out: List[Dict[str, str]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(out, me)
    return out


def gather(value) -> list:
    """all_gather_object of one picklable value per rank."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def mean_across_ranks(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


def checksum(tensors) -> float:
    """A position-sensitive float64 checksum of a list of tensors (identical values -> identical sum)."""
    total = 0.0
    for i, t in enumerate(tensors):
        flat = t.detach().to("cpu", torch.float64).reshape(-1)
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64) / max(flat.numel(), 1)
        total += float((flat * weights).sum()) * (i + 1)
    return total


def maybe_break(step: int) -> None:
    """Failure drills for verify's own tests: SIMCLUSTER_BREAK=crash|hang breaks the last rank.

    crash: it raises at step 3 (srun --kill-on-bad-exit then ends the other ranks);
    hang: it stops answering at step 3, so the others wait in a collective until verify's
    timeout cancels the job. Unset in normal runs.
    """
    mode = os.environ.get("SIMCLUSTER_BREAK", "")
    if not mode or step != 3 or dist.get_rank() != dist.get_world_size() - 1:
        return
    if mode == "crash":
        raise RuntimeError("SIMCLUSTER_BREAK=crash: injected failure on the last rank")
    if mode == "hang":
        log("SIMCLUSTER_BREAK=hang: the last rank stops answering")
        time.sleep(10 ** 6)  # deliberate: a hung rank, for the checks that must notice one


def train_regression(step, rank: int, steps: int, batch: int, device) -> List[float]:
    """Train on every rank's own shard of one regression problem y = x . w* (w* the same on
    every rank); ``step(x, y)`` runs one forward/backward/update and returns the loss.
    Returns the loss averaged across ranks after each step."""
    w_true = torch.randn(16, 1, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(rank)
    losses = []
    for i in range(steps):
        maybe_break(i)
        x = torch.randn(batch, 16, generator=gen)
        loss = step(x.to(device), (x @ w_true).to(device))
        losses.append(mean_across_ranks(loss.item(), device))
    return losses


def plain_step(model, opt):
    """A step for train_regression: MSE loss, backward, optimizer step."""

    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def emit(result: Dict) -> None:
    """Rank 0 prints the one result line verify parses."""
    if dist.get_rank() == 0:
        print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)


def finish() -> None:
    """End the process once every rank is done: barrier(), then os._exit(0).

    Without the barrier FSDP was seen to hang at exit. After it, destroy_process_group()
    and the interpreter's own teardown were seen to abort a gloo rank now and then
    ("terminate called without an active exception", SIGABRT, about 1 job in 15 on 2 CPU
    cores) when its peer closed the connection first: a torch teardown race that says
    nothing about the cluster, after the result line is out. os._exit skips it; the kernel
    closes the sockets.
    """
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
