#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --gres=gpu:1

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
srun -K1 --label bash -lc "
    export RANK=\$SLURM_PROCID \
           LOCAL_RANK=\$SLURM_LOCALID
    exec python \"$SLURM_SUBMIT_DIR/train.py\"
"
