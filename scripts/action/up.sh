#!/usr/bin/env bash
# GitHub Action step 2: `simcluster up` from the inputs, then hand the cluster to the
# steps that follow: `simcluster env`'s exports go to GITHUB_ENV, and where Slurm commands
# must run inside the cluster (docker) a wrapper per command goes in a directory on
# GITHUB_PATH, so `sbatch`, `srun`, `sinfo` ... work in later steps on every backend.
#
# Inputs (environment): INPUT_NAME, INPUT_NODES, INPUT_GPUS ('6,7', 'fake:K', 'fake:6,7'),
# INPUT_BACKEND, INPUT_SLURM, INPUT_ACCOUNTING, INPUT_WAIT, INPUT_SUDO (auto|true|false).
# Outputs: name, bin-dir, sudo (true when root made the cluster through sudo).
#
# A runner user who is not root but may use sudo without a password (GitHub's hosted runners)
# gets root's cluster (`up --sudo`: namespaces, hostnames, cgroups, GPU devices), which serves
# that user: `simcluster env` and every Slurm command of the later steps run as the user.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

name="$(input NAME ci)"
nodes="$(input NODES 2)"
gpus="$(input GPUS "")"
backend="$(input_choice BACKEND local local docker)"
slurm="$(input SLURM "")"
accounting="$(input_bool ACCOUNTING false)"
wait_s="$(input WAIT 120)"
sudo_mode="$(input_choice SUDO auto auto true false)"
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || fail "input 'nodes' must be a positive whole number; got '$nodes'"
[[ "$wait_s" =~ ^[0-9]+$ ]] || fail "input 'wait' must be a number of seconds; got '$wait_s'"
: "${GITHUB_ENV:?GITHUB_ENV is not set}" "${GITHUB_PATH:?GITHUB_PATH is not set}"

# --retain: a cluster that fails to come up is kept, so the failure step can bundle its logs.
args=(up --name "$name" --nodes "$nodes" --backend "$backend" --wait "$wait_s" --retain)
case "$gpus" in
  "") ;;
  fake:*[!0-9]*) args+=(--gpus "${gpus#fake:}" --fake-gpus) ;;   # fake:6,7 -> those ids, simulated
  fake:*) args+=(--fake-gpus "${gpus#fake:}") ;;                  # fake:K   -> K simulated GPUs
  *) args+=(--gpus "$gpus") ;;
esac
[ -z "$slurm" ] || args+=(--slurm "$slurm")
[ "$accounting" = false ] || args+=(--accounting)
sudo_used=false
decide_sudo "$sudo_mode" "$backend"
if [ "$sudo_used" = true ]; then
  args+=(--sudo)
  echo "::notice::simcluster up runs as root through sudo (input sudo: $sudo_mode; $(id -un) is not root): each node gets its own network namespace, hostname and cgroups; jobs of later steps run as $(id -un). Input sudo: false makes a rootless cluster instead."
elif [ "$(id -u)" != 0 ] && [ "$backend" = local ]; then
  echo "::notice::simcluster up runs as $(id -un) (rootless: no sudo without a password, or input sudo: false): nodes share this runner's network and hostname, and no limit is enforced"
fi
# Said before `up` runs: the failure step needs it most when `up` fails.
[ -z "${GITHUB_OUTPUT:-}" ] || echo "sudo=$sudo_used" >> "$GITHUB_OUTPUT"
echo "+ simcluster ${args[*]}"
simcluster "${args[@]}"

bin_dir="${RUNNER_TEMP:-/tmp}/simcluster-$name/bin"
mkdir -p "$bin_dir"
{
  echo "SIMCLUSTER_NAME=$name"
  [ -z "${SIMCLUSTER_HOME:-}" ] || echo "SIMCLUSTER_HOME=$SIMCLUSTER_HOME"
} >> "$GITHUB_ENV"
wrappers=0
path_dirs=()
while IFS= read -r line; do
  if [[ "$line" =~ ^export\ PATH= ]]; then
    # 'export PATH=<dir>:"$PATH"': the directories it puts first go to GITHUB_PATH (GitHub
    # prepends each line), not a whole PATH into GITHUB_ENV.
    old_path="$PATH"
    eval "$line"
    added="${PATH%":$old_path"}"
    PATH="$old_path"
    [ "$added" = "$PATH" ] || IFS=: read -r -a path_dirs <<< "$added"
  elif [[ "$line" =~ ^export\ ([A-Za-z_][A-Za-z0-9_]*)= ]]; then
    var="${BASH_REMATCH[1]}"
    eval "$line"  # the value as the shell reads it (simcluster env quotes it)
    printf '%s=%s\n' "$var" "${!var}" >> "$GITHUB_ENV"
  elif [[ "$line" =~ ^([a-z]+)\(\)\ \{\ (.*)\ \"\$@\"\;\ \}$ ]]; then
    # 'sbatch() { docker exec -i simcluster-ci-ctl sbatch "$@"; }' -> an executable wrapper
    printf '#!/bin/sh\nexec %s "$@"\n' "${BASH_REMATCH[2]}" > "$bin_dir/${BASH_REMATCH[1]}"
    chmod +x "$bin_dir/${BASH_REMATCH[1]}"
    wrappers=$((wrappers + 1))
  fi
done < <(simcluster env --name "$name")
[ "$wrappers" = 0 ] || path_dirs+=("$bin_dir")
for ((i = ${#path_dirs[@]} - 1; i >= 0; i--)); do echo "${path_dirs[i]}" >> "$GITHUB_PATH"; done
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  { echo "name=$name"; echo "bin-dir=$bin_dir"; } >> "$GITHUB_OUTPUT"
fi
echo "cluster '$name' is ready for the next steps (GITHUB_ENV: its exports; GITHUB_PATH: ${path_dirs[*]:-nothing})"
