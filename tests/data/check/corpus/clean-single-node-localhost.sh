#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gres=gpu:2
#SBATCH --ntasks-per-node=1

export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
torchrun --standalone --nproc_per_node=2 --master_addr=127.0.0.1 train.py
