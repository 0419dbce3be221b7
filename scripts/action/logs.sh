#!/usr/bin/env bash
# GitHub Action, on failure: write the cluster's export-logs bundle for upload-artifact.
# Inputs (environment): INPUT_NAME, UP_SUDO (the up step's output sudo). Output: dir (the
# bundle; printed too). A cluster that root made through sudo (up.sh) keeps its daemons' logs
# root's: its bundle is written through sudo too, then handed to the runner's user for
# upload-artifact.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
name="$(input NAME ci)"
dir="${RUNNER_TEMP:-/tmp}/simcluster-logs-$name"
exported=false
whose=""
if ! command -v simcluster >/dev/null; then
  :
elif [ "${UP_SUDO:-}" = true ]; then
  whose=" (root's, through sudo)"
  if sudo -n -- env "SIMCLUSTER_HOME=${SIMCLUSTER_HOME:-}" "$(command -v simcluster)" export-logs "$dir" --name "$name" \
      && sudo -n chown -R "$(id -u):$(id -g)" "$dir"; then
    exported=true
  fi
elif simcluster export-logs "$dir" --name "$name"; then
  exported=true
fi
if [ "$exported" = true ]; then
  echo "export-logs bundle of cluster '$name'$whose: $dir"
else
  # up failed before the cluster existed, or simcluster is not installed: keep what there is.
  mkdir -p "$dir"
  echo "simcluster export-logs --name $name found no cluster (see the up step's output)" > "$dir/README.txt"
fi
[ -z "${GITHUB_OUTPUT:-}" ] || echo "dir=$dir" >> "$GITHUB_OUTPUT"
