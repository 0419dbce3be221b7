#!/usr/bin/env bash
# Make sure a docker engine answers: install docker.io + debootstrap if missing, start
# dockerd in the background if none runs (machines and CI runners without systemd).
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
need=""
command -v dockerd >/dev/null || need="$need docker.io"
command -v debootstrap >/dev/null || need="$need debootstrap"
if [ -n "$need" ]; then
  echo "installing:$need"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if docker version >/dev/null 2>&1; then
  echo "docker engine: running"; exit 0
fi
if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
  $SUDO systemctl start docker
else
  echo "starting dockerd (log: /var/log/simcluster-dockerd.log)"
  $SUDO sh -c 'nohup dockerd >/var/log/simcluster-dockerd.log 2>&1 &'
fi
for _ in $(seq 1 120); do
  docker version >/dev/null 2>&1 && { echo "docker engine: running"; exit 0; }
  sleep 0.5
done
echo "error: dockerd did not start; see /var/log/simcluster-dockerd.log" >&2
tail -20 /var/log/simcluster-dockerd.log >&2 || true
exit 1
