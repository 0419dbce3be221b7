from mpi4py import MPI

import torch.distributed as dist

comm = MPI.COMM_WORLD
dist.init_process_group("nccl", init_method="env://", rank=comm.Get_rank(), world_size=comm.Get_size())
