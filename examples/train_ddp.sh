#!/bin/bash
# PyTorch DDP on 2 nodes x 1 GPU, launched by torchrun: `sbatch train_ddp.sh`.
# Runs unchanged on a simcluster cluster (simcluster up --nodes 2 --fake-gpus 2) and on a
# real one. For production, raise --cpus-per-task/--mem/--time (e.g. 28/200G/24h).
#SBATCH --job-name=ddp-training
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
#SBATCH --time=00:10:00
#SBATCH --output=train_%j.out
set -euo pipefail

# The directory this script was submitted from (Slurm runs a copy from its spool).
HERE=$(dirname "$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')")
# Python environment: the one active at sbatch time (sbatch exports it), $VENV, or a .venv nearby.
if [ -n "${VENV:-}" ]; then source "$VENV/bin/activate"
elif ! command -v torchrun >/dev/null; then
  for d in "$HERE" "$HERE/.." "$SLURM_SUBMIT_DIR"; do [ -f "$d/.venv/bin/activate" ] && { source "$d/.venv/bin/activate"; break; }; done
fi

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
# A port per job: two jobs on one host (or one node) must not share a rendezvous port.
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "Master: $MASTER_ADDR:$MASTER_PORT, nodes: $SLURM_JOB_NODELIST"

# \$SLURM_NODEID is escaped: each task expands its own node rank. Written as
# `srun torchrun --node_rank=$SLURM_NODEID` (as in many guides), the batch shell expands it
# once, to 0, for every task: on one host the second torchrun fails with EADDRINUSE,
# on real hosts the job hangs.
srun --kill-on-bad-exit=1 bash -c "torchrun \
    --nnodes=\$SLURM_JOB_NUM_NODES --node_rank=\$SLURM_NODEID --nproc_per_node=1 \
    --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT \
    '$HERE/train_ddp.py' --epochs 5"
