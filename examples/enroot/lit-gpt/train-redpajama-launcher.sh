#!/bin/bash
# The workflow's worker launcher, as written (its fragments in order): one per task.

export GPT_WORLD_SIZE=$SLURM_STEP_NUM_TASKS
export GPT_NUM_NODES=$SLURM_STEP_NUM_NODES
export GPT_LOCAL_RANK=$SLURM_LOCALID
export GPT_NODE_RANK=$SLURM_NODEID
export GPT_GLOBAL_RANK=$(($SLURM_NODEID * $SLURM_NTASKS_PER_NODE + $SLURM_LOCALID))
export GPT_DEVICES_PER_NODE=${SLURM_GPUS_PER_TASK:-$SLURM_GPUS_PER_NODE}

if [ -z "$SLURM_INTERACTIVE" ] && [ $SLURM_LOCALID -eq 0 ]; then
  nvidia-smi | grep "NVIDIA H800"
  nvidia-smi dmon --delay 15 --select pumt --options DT \
    --filename $PWD/out/slurm/slurm-$SLURM_JOB_ID.$(hostname).gutil &
  export GPT_NVIDIA_SMI_DMON_PID=$!
fi

python3 pretrain/redpajama.py --name test --model_name tiny-llama-1.1b \
  --max_steps 131072 --decay_steps 131072 --lr 5e-3 \
  --micro_batch_size 10 --batch_size 2048 --precision bf16-true \
  --parallel_strategy "ddp" $GPT_SLURM_INTERACTIVE \
  --world_size "$GPT_WORLD_SIZE" --num_nodes "$GPT_NUM_NODES" \
  --devices_per_node "$GPT_DEVICES_PER_NODE" --global_rank "$GPT_GLOBAL_RANK" \
  --node_rank "$GPT_NODE_RANK" --local_rank "$GPT_LOCAL_RANK"

# Kill NVIDIA_SMI_DMON
[ -z "$SLURM_INTERACTIVE" ] && [ $SLURM_LOCALID -eq 0 ] && kill $GPT_NVIDIA_SMI_DMON_PID
