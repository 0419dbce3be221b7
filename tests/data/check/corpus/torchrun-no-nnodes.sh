#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
# one torchrun agent per node, and no --nnodes: torchrun's default is one node, so each node
# forms a job of its own and trains alone
srun --kill-on-bad-exit=1 torchrun --nproc_per_node=4 train.py
