#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-node=1

# Slurm automatically sets up MPI environment
srun python train_ddp.py
