#!/usr/bin/env bash
# GitHub Action step 1: install what `simcluster up` needs for the chosen backend, then
# simcluster itself into a venv whose bin/ goes on GITHUB_PATH for the later steps.
#
# Inputs (environment): INPUT_BACKEND (local|docker), INPUT_ACCOUNTING (true|false),
# INPUT_SIMCLUSTER (pip requirement; empty: the action's own checkout, GITHUB_ACTION_PATH).
# SIMCLUSTER_ACTION_DRY_RUN=1 prints the apt/pip commands instead of running them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

backend="$(input_choice BACKEND local local docker)"
accounting="$(input_bool ACCOUNTING false)"

# Debian/Ubuntu packages. Local clusters run the daemons on the runner; docker clusters run
# them in containers built from the node image, so the runner needs only the engine.
packages=(python3-venv)
if [ "$backend" = local ]; then
  packages+=(slurmctld slurmd slurm-client munge libnss-wrapper tini)
  if [ "$accounting" = true ]; then packages+=(slurmdbd mariadb-server-core mariadb-client-core); fi
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
if [ "${#missing[@]}" -gt 0 ]; then
  run "${sudo_cmd[@]}" apt-get update -qq
  run "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "apt packages: all present (${packages[*]})"
fi
if [ "$backend" = docker ] && [ "${SIMCLUSTER_ACTION_DRY_RUN:-}" != 1 ] && ! docker version >/dev/null 2>&1; then
  fail "backend docker: no docker engine answers on this runner (use a Linux runner with docker, e.g. ubuntu-latest)"
fi

venv="${RUNNER_TEMP:-/tmp}/simcluster-venv"
source_spec="${INPUT_SIMCLUSTER:-}"
[ -n "$source_spec" ] || source_spec="${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH is not set: run as a GitHub Action, or set INPUT_SIMCLUSTER}"
run python3 -m venv "$venv"
run "$venv/bin/pip" install -q --disable-pip-version-check "$source_spec"
echo "$venv/bin" >> "${GITHUB_PATH:?GITHUB_PATH is not set}"
echo "simcluster installed in $venv (on PATH for the next steps)"
