#!/bin/sh
# Test host start: fresh host keys per container (as on real machines), the test run's
# public key for root, then sshd in the foreground (docker --init reaps the daemons that
# the deploy starts).
set -eu
ssh-keygen -A >/dev/null
printf '%s\n' "${AUTHORIZED_KEY:?AUTHORIZED_KEY must hold the test run's public key}" > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
exec /usr/sbin/sshd -D -e
