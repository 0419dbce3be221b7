import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu, ngpus_per_node, args):
    node = int(os.environ["SLURM_NODEID"])
    rank = node * ngpus_per_node + gpu
    world = int(os.environ["SLURM_NNODES"]) * ngpus_per_node
    dist.init_process_group("nccl", init_method=args.dist_url, rank=rank, world_size=world)


def main(args):
    ngpus_per_node = torch.cuda.device_count()
    mp.spawn(worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
