#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))

srun --kill-on-bad-exit=1 accelerate launch --num_machines=2 --num_processes=2 \
    --machine_rank=$SLURM_NODEID --main_process_ip=$MASTER_ADDR --main_process_port=$MASTER_PORT train.py
