# shared settings for the experiments
export NCCL_DEBUG=INFO
export MASTER_ADDR=localhost
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
