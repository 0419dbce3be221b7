#!/bin/bash
#SBATCH --job-name=distributed-training
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=28
#SBATCH --mem=200G
#SBATCH --time=24:00:00
#SBATCH --output=train_%j.out
#SBATCH --error=train_%j.err
#SBATCH --signal=B:SIGUSR1@90

# Setup distributed training environment
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))

# NCCL settings
export NCCL_DEBUG=INFO
export NCCL_IB_DISABLE=0

# Handle checkpoint signal
trap 'echo "Checkpointing..."; python checkpoint.py' SIGUSR1

# Run training (in the background: bash runs the trap only while it waits)
srun --kill-on-bad-exit=1 torchrun \
    --nproc_per_node=1 \
    --nnodes=$SLURM_JOB_NUM_NODES \
    --rdzv_id=$SLURM_JOB_ID \
    --rdzv_backend=c10d \
    --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT \
    train_distributed.py \
    --resume \
    --checkpoint_dir=/path/to/checkpoints &
wait
