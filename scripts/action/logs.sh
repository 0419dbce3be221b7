#!/usr/bin/env bash
# GitHub Action, on failure: write the cluster's export-logs bundle for upload-artifact.
# Inputs (environment): INPUT_NAME. Output: dir (the bundle; printed too).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
name="$(input NAME ci)"
dir="${RUNNER_TEMP:-/tmp}/simcluster-logs-$name"
if command -v simcluster >/dev/null && simcluster export-logs "$dir" --name "$name"; then
  echo "export-logs bundle of cluster '$name': $dir"
else
  # up failed before the cluster existed, or simcluster is not installed: keep what there is.
  mkdir -p "$dir"
  echo "simcluster export-logs --name $name found no cluster (see the up step's output)" > "$dir/README.txt"
fi
[ -z "${GITHUB_OUTPUT:-}" ] || echo "dir=$dir" >> "$GITHUB_OUTPUT"
