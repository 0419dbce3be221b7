import os

import torch.distributed as dist
import torch.multiprocessing as mp


def run(local_rank):
    node = int(os.environ["SLURM_NODEID"])
    dist.init_process_group("nccl", rank=node * 8 + local_rank, world_size=16)


if __name__ == "__main__":
    mp.spawn(run, nprocs=8)
