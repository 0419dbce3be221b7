import os

import torch.distributed as dist

rank = int(os.environ["SLURM_PROCID"])
world = int(os.environ["SLURM_NTASKS"])
dist.init_process_group("nccl", rank=rank, world_size=world)
