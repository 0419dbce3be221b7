"""DDP smoke test that `verify --ssh --suite ddp` runs with torchrun on every node.

Not imported by simcluster: its text is put in the batch script and spread to the nodes
with sbcast (real hosts share no filesystem). CPU and gloo, so any node can run it; each
rank trains the same tiny model on different data, and DDP must leave identical weights
on every rank. Prints one DDP_OK line per rank.
"""

import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    backend = "nccl" if torch.cuda.is_available() and os.environ.get("SIMCLUSTER_DDP_NCCL") == "1" else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere; DDP also broadcasts rank 0's
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # different data per rank
    for _ in range(5):
        x = torch.randn(16, 8, generator=data)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()  # gradients are all-reduced across ranks here
        opt.step()
    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"DDP_OK rank={rank} world={world} host={socket.gethostname()} backend={backend} "
          f"allreduce={ranks.item():.0f} checksum={checksum:.8f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
