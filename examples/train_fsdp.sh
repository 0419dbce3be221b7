#!/bin/bash
# PyTorch FSDP on 2 nodes x 1 GPU, torchrun with c10d rendezvous: `sbatch train_fsdp.sh`.
# Runs unchanged on a simcluster cluster and on a real one (raise cpus/mem/time there).
#SBATCH --job-name=fsdp-training
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
#SBATCH --time=00:10:00
#SBATCH --output=train_%j.out
set -euo pipefail

HERE=$(dirname "$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')")
if [ -n "${VENV:-}" ]; then source "$VENV/bin/activate"
elif ! command -v torchrun >/dev/null; then
  for d in "$HERE" "$HERE/.." "$SLURM_SUBMIT_DIR"; do [ -f "$d/.venv/bin/activate" ] && { source "$d/.venv/bin/activate"; break; }; done
fi

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}

# c10d rendezvous: torchrun agents agree on node ranks themselves, so nothing per-task
# has to be expanded (no --node_rank; compare train_ddp.sh).
srun --kill-on-bad-exit=1 torchrun \
    --nnodes="$SLURM_JOB_NUM_NODES" --nproc_per_node=1 \
    --rdzv_id="$SLURM_JOB_ID" --rdzv_backend=c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \
    "$HERE/train_fsdp.py" --steps 40 --checkpoint-dir "$SLURM_SUBMIT_DIR/fsdp_ckpt_$SLURM_JOB_ID"
