#!/bin/bash
torchrun --nnodes=$SLURM_NNODES --nproc_per_node=8 \
    --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT \
    ../train.py
