#!/bin/bash
# runs once per node (one srun task per node): each task's shell expands its own SLURM_NODEID
set -euo pipefail
torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=8 \
    --node_rank="$SLURM_NODEID" \
    --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \
    train.py
