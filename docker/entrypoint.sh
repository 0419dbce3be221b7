#!/bin/sh
# simcluster node entrypoint: role "controller" runs slurmctld, role "node" runs slurmd.
# Configs and the munge key come read-only from /etc/simcluster (mounted by simcluster);
# fake GPUs are character devices made here, as /dev/nvidiaN (major 195, minor N).
set -eu
ROLE="${1:?usage: simcluster-entrypoint controller|node}"
export SLURM_CONF=/etc/simcluster/slurm.conf

install -m 0400 -o munge -g munge /etc/simcluster/munge.key /etc/munge/munge.key
chown munge:munge /run/munge
su -s /bin/sh munge -c "munged --force"

for gpu in ${SIMCLUSTER_FAKE_GPUS:-}; do
  [ -e "/dev/nvidia$gpu" ] || mknod -m 666 "/dev/nvidia$gpu" c 195 "$gpu"
done

# accounting: true: a MariaDB and slurmdbd in the controller container, started before
# slurmctld, with the cluster, an account and root registered, as the local backend does.
# slurmdbd.conf (mode 0600, with the database password) sits next to slurm.conf.
start_accounting() {
  conf=/etc/simcluster/slurmdbd.conf
  get() { sed -n "s/^$1=//p" "$conf"; }
  data=/var/lib/simcluster-db
  mkdir -p "$data" /run/mysqld
  # The SQL of provisioner/actions/mariadb.py (bootstrap_header, system tables, init_sql),
  # with the user and password taken from slurmdbd.conf: the password is in no other file.
  # shellcheck disable=SC2086  # the *_OPTS variables are lists of options
  {
    # --bootstrap reads one statement per line.
    printf '%s\n' "CREATE DATABASE IF NOT EXISTS mysql;" "USE mysql;" "SET @auth_root_socket='root';"
    cat /usr/share/mysql/mysql_system_tables.sql /usr/share/mysql/mysql_performance_tables.sql \
        /usr/share/mysql/mysql_system_tables_data.sql
    echo "FLUSH PRIVILEGES;"
    for host in localhost 127.0.0.1; do
      echo "CREATE USER '$(get StorageUser)'@'$host' IDENTIFIED BY '$(get StoragePass)';"
      echo "GRANT ALL ON \`$(get StorageLoc)\`.* TO '$(get StorageUser)'@'$host';"
    done
  } | mariadbd --no-defaults --bootstrap --datadir="$data" --user=root \
        ${SIMCLUSTER_MARIADB_BOOTSTRAP_OPTS:-} ${SIMCLUSTER_MARIADB_OPTS:-} \
        >/var/log/slurm/mariadb-install.log 2>&1 \
    || { echo "creating the accounting database failed:" >&2; tail -n 20 /var/log/slurm/mariadb-install.log >&2; exit 1; }
  mariadbd --no-defaults --datadir="$data" --socket=/run/mysqld/mysqld.sock --port="$(get StoragePort)" \
    --bind-address=127.0.0.1 --user=root --log-error=/var/log/slurm/mariadbd.log ${SIMCLUSTER_MARIADB_OPTS:-} &
  db=$!
  # slurmdbd started before MariaDB answers waits a fixed 5 s before it tries again.
  tries=0
  until [ -S /run/mysqld/mysqld.sock ]; do
    kill -0 "$db" 2>/dev/null || { echo "mariadbd exited during startup:" >&2; tail -n 20 /var/log/slurm/mariadbd.log >&2; exit 1; }
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { echo "mariadbd did not start within 60 s" >&2; tail -n 20 /var/log/slurm/mariadbd.log >&2; exit 1; }
    sleep 0.05
  done
  slurmdbd -D >/var/log/slurm/slurmdbd.out 2>&1 &   # finds slurmdbd.conf next to $SLURM_CONF
  dbd=$!
  # slurmdbd listens once it has reached MariaDB and made its tables.
  port_hex=$(printf ':%04X' "$(get DbdPort)")
  tries=0
  until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$port_hex [0-9A-F]*:0000 0A"; do
    kill -0 "$dbd" 2>/dev/null || { echo "slurmdbd exited during startup:" >&2; tail -n 20 /var/log/slurm/slurmdbd.log >&2; exit 1; }
    tries=$((tries + 1))
    [ "$tries" -lt 600 ] || { echo "slurmdbd did not listen within 60 s" >&2; tail -n 20 /var/log/slurm/slurmdbd.log >&2; exit 1; }
    sleep 0.1
  done
  # The cluster, the simcluster account and root (accounts.cfg is written by `up`).
  sacctmgr -i load file=/etc/simcluster/accounts.cfg >/var/log/slurm/sacctmgr-setup.log 2>&1 \
    || { echo "registering the cluster in accounting failed:" >&2; cat /var/log/slurm/sacctmgr-setup.log >&2; exit 1; }
}

case "$ROLE" in
  controller)
    [ -f /etc/simcluster/slurmdbd.conf ] && start_accounting
    exec slurmctld -D -f "$SLURM_CONF" ;;
  node)
    # Node containers start first, so that slurmctld can resolve every node name when it
    # starts (it retries an unknown name for 10 s). slurmd registers once it answers.
    tries=0
    until scontrol ping >/dev/null 2>&1; do
      tries=$((tries + 1))
      [ "$tries" -lt 1200 ] || { echo "slurmctld never answered" >&2; exit 1; }
      sleep 0.1
    done
    exec slurmd -D -N "$(hostname)" -f "$SLURM_CONF" ;;
  *) echo "unknown role: $ROLE" >&2; exit 2 ;;
esac
