#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --time=24:00:00
#SBATCH --signal=B:SIGUSR1@90  # B: the batch shell gets it, so its trap runs

# Handle checkpoint signal
trap 'echo "Checkpointing..."; python checkpoint.py' SIGUSR1

# srun starts the training on every node; in the background, so bash can run the trap
srun --kill-on-bad-exit=1 bash -c 'RANK=$SLURM_PROCID exec python train.py --resume --checkpoint_dir=/path/to/checkpoints' &
wait
