#!/bin/bash
# The workflow's pre-launch script, as written (its fragments in order). It runs inside the
# container (sbatch --container-image=...): scontrol, python and srun come from the image.

export DEBUG=$(echo "${DEBUG,,}" | grep -q -e '^on\|y\(es\)\?\|t\(rue\)\?\|1$' && echo 1 || echo 0)
export SLURM_INTERACTIVE=$(test -n "$SLURM_PTY_PORT" && echo 1)

export PYTHONFAULTHANDLER=${PYTHONFAULTHANDLER:-1}
export CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:0}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET}

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sort | head -n 1)
export MASTER_PORT=54321
export GPT_GLOBAL_SEED="$(python -c 'import numpy; print(numpy.random.randint(2**30-1))')"

[ -z "$SLURM_INTERACTIVE" ] && (
  bash -c "while sleep 120; do date --iso-8601=sec; done" &
  export GPT_TIMESTAMPING_PID=$!
)

if [ -z "$SLURM_INTERACTIVE" ]; then
  exec srun --mpi=none ./train-redpajama-launcher.sh
else
  # Interactive mode setup
  exec srun --overlap --nodes=1 --ntasks-per-node=8 --mpi=none ./train-redpajama-launcher.sh
fi

# Kill GPT_TIMESTAMPING
[ -z "$SLURM_INTERACTIVE" ] && kill $GPT_TIMESTAMPING_PID
