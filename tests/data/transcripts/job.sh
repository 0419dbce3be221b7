#!/bin/bash
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@90
trap 'echo "checkpoint at $(date +%T)"' USR1
while true; do sleep 1 & wait $!; done
