#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
declare -a SRUN_ARGS=(--kill-on-bad-exit=1 -l)
declare -a TORCHRUN_ARGS=(
    --nproc_per_node=4
    --nnodes=$SLURM_JOB_NUM_NODES
    --rdzv_id=$SLURM_JOB_ID
    --rdzv_backend=c10d
    --rdzv_endpoint=$HEAD_NODE:29500
)
TORCHRUN_ARGS+=(--max_restarts=0)
srun "${SRUN_ARGS[@]}" torchrun "${TORCHRUN_ARGS[@]}" train.py --epochs 3
