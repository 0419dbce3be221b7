#!/usr/bin/env bash
# GitHub Action, on failure: write the cluster's export-logs bundle for upload-artifact.
# Inputs (environment): INPUT_NAME, INPUT_SUDO. Output: dir (the bundle; printed too).
# A cluster root made through sudo (up.sh) keeps its daemons' logs root's: its bundle is
# written through sudo too, then handed to the runner's user for upload-artifact.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
name="$(input NAME ci)"
dir="${RUNNER_TEMP:-/tmp}/simcluster-logs-$name"
# Whether up could have used sudo (any backend: its bundle is what counts here).
sudo_used=false
decide_sudo "$(input SUDO auto)" local
if command -v simcluster >/dev/null && simcluster export-logs "$dir" --name "$name"; then
  echo "export-logs bundle of cluster '$name': $dir"
elif [ "$sudo_used" = true ] && sudo -n -- env "SIMCLUSTER_HOME=${SIMCLUSTER_HOME:-}" \
    "$(command -v simcluster)" export-logs "$dir" --name "$name" \
    && sudo -n chown -R "$(id -u):$(id -g)" "$dir"; then
  echo "export-logs bundle of root's cluster '$name' (through sudo): $dir"
else
  # up failed before the cluster existed, or simcluster is not installed: keep what there is.
  mkdir -p "$dir"
  echo "simcluster export-logs --name $name found no cluster (see the up step's output)" > "$dir/README.txt"
fi
[ -z "${GITHUB_OUTPUT:-}" ] || echo "dir=$dir" >> "$GITHUB_OUTPUT"
