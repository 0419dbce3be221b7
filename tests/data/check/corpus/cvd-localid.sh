#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))

srun --kill-on-bad-exit=1 bash -c "
    export CUDA_VISIBLE_DEVICES=\$SLURM_LOCALID
    RANK=\$SLURM_PROCID exec python train.py
"
