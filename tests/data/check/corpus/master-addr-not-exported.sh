#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))

srun --kill-on-bad-exit=1 bash -c "torchrun --nnodes=2 --nproc_per_node=1 --node_rank=\$SLURM_NODEID \
    --master_addr=\$MASTER_ADDR --master_port=\$MASTER_PORT train.py"
