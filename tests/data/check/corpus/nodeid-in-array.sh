#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
TORCHRUN_ARGS=(
    --nnodes "$SLURM_JOB_NUM_NODES"
    --nproc_per_node 4
    --node_rank "$SLURM_NODEID"
    --master_addr "$MASTER_ADDR"
    --master_port 29500
)
srun --kill-on-bad-exit=1 torchrun "${TORCHRUN_ARGS[@]}" train.py
