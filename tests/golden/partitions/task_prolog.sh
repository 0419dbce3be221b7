#!/bin/sh
# TaskProlog for cluster "big", rendered by simcluster from
# configs/templates/task_prolog.sh.j2. Runs before every task of every job step; each
# "export K=V" line it prints is set in the task's environment. It must print nothing else.
#
# Why: several slurmd share one host, so Slurm gives CUDA_VISIBLE_DEVICES as the index of
# the GPU *within the node* (0 on every node). Without device cgroups every job would land
# on physical GPU 0. Here the node-local indices become the node's physical GPU ids.

case "$SLURMD_NODENAME" in
  node1) physical="0 1" ;;
  node2) physical="2 3" ;;
  node3) physical="4 5" ;;
  node4) physical="6 7" ;;
  *) physical="" ;;
esac

local_ids="${SLURM_STEP_GPUS:-$SLURM_JOB_GPUS}"
if [ -n "$local_ids" ] && [ -n "$physical" ]; then
  mapped=""
  for idx in $(echo "$local_ids" | tr ',' ' '); do
    i=0
    for gpu in $physical; do
      if [ "$i" = "$idx" ]; then mapped="${mapped:+$mapped,}$gpu"; fi
      i=$((i + 1))
    done
  done
  echo "export CUDA_VISIBLE_DEVICES=$mapped"
  # Physical ids are /dev/nvidiaN minors, i.e. nvidia-smi (PCI bus) order; CUDA's default
  # order (fastest first) could differ on mixed machines.
  echo "export CUDA_DEVICE_ORDER=PCI_BUS_ID"
  echo "export SIMCLUSTER_PHYSICAL_GPUS=$mapped"
else
  # No GPU allocated to this step: see none, as on a cluster with device cgroups.
  echo "export CUDA_VISIBLE_DEVICES="
fi

# Node names resolve inside jobs (MASTER_ADDR=$(scontrol show hostnames ...)) without
# touching /etc/hosts: libnss_wrapper reads this cluster's own hosts file.
echo "export LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD:}/usr/lib/x86_64-linux-gnu/libnss_wrapper.so"
echo "export NSS_WRAPPER_HOSTS=/state/parts/etc/hosts"

# Open MPI between virtual nodes of one host: over loopback its TCP transport skips lo by
# default (a job across nodes then hangs in its first collective), and its shared-memory
# transport crashed now and then (segfaults in btl_vader) with two "nodes" of one host.
# Over TCP on the nodes' network (or loopback) every run passed. A job's own setting wins.
echo "export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}"
echo "export OMPI_MCA_btl=${OMPI_MCA_btl:-self,tcp}"

# Fake GPUs: simcluster's nvidia-smi (bin/ beside this file, written at `up` only where
# the GPUs are fake; provisioner/cluster/services/fakegpus) comes first on PATH. Nodes with real
# GPUs have no such file and keep the real one.
if [ -x "/state/parts/etc/bin/nvidia-smi" ]; then
  case ":$PATH:" in
    *":/state/parts/etc/bin:"*) ;;  # there already (a step started from a job that has it)
    *) echo "export PATH=/state/parts/etc/bin${PATH:+:$PATH}" ;;
  esac
fi
echo "export SIMCLUSTER_CLUSTER=big"
echo "export SIMCLUSTER_STATE_DIR=/state/parts"
