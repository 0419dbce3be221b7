"""The accounting database's text, for every backend and for real hosts: the SQL that
bootstraps a fresh MariaDB data directory, the server's options, and the sacctmgr commands
that register a cluster.

Standard library only, with no imports from the package: the Ansible roles' filter plugin
(ansible/filter_plugins/simcluster.py) loads this file by path, so `simcluster deploy` and
a plain ansible-playbook run create the database with exactly the SQL `up` uses
(cluster/services/accounting.py).
"""

from __future__ import annotations

from typing import Dict, List, Sequence

ACCOUNT = "simcluster"  # every user of the cluster is charged to it by default
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
# Where Debian (and most distributions) keep the SQL that mariadb-install-db feeds the server.
SQL_DIRS = ("/usr/share/mysql", "/usr/share/mariadb")
SYSTEM_TABLES_SQL = ("mysql_system_tables.sql", "mysql_performance_tables.sql", "mysql_system_tables_data.sql")
# MariaDB 11 (Debian trixie and sid: the 24.11 and 26.05 node images) names them mariadb_*.
SYSTEM_TABLES_SQL_11 = tuple(name.replace("mysql_", "mariadb_", 1) for name in SYSTEM_TABLES_SQL)

# A test cluster's accounting database holds a few thousand rows, and it lives exactly
# as long as the cluster: small buffers, and no fsync per commit nor doublewrite
# (durability buys nothing for data deleted by `down`, and fsyncs are slow on busy disks).
SERVER_OPTIONS = [
    "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M", "--innodb-log-buffer-size=2M",
    "--aria-pagecache-buffer-size=1M", "--key-buffer-size=1M", "--max-connections=50",
    "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
    "--innodb-autoextend-increment=4", "--innodb-temp-data-file-path=ibtmp1:4M:autoextend",  # ~25 MB on disk
    "--innodb-lock-wait-timeout=900",  # Slurm's recommended value
    "--performance-schema=OFF", "--skip-log-bin", "--skip-name-resolve",
]
# mariadbd --bootstrap options beyond the server's: quiet, any storage engine, room for the SQL.
BOOTSTRAP_OPTIONS = ["--log-warnings=0", "--enforce-storage-engine=", "--max-allowed-packet=8M"]


def bootstrap_sql(system_tables: Sequence[str], socket_user: str, password: str) -> str:
    """What mariadb-install-db would feed the server -- ``system_tables``, the texts of
    SYSTEM_TABLES_SQL in that order (the tables a server needs, without the help tables and
    sys schema: a quarter of the CPU time) -- then the slurm database user for the socket
    and for TCP from 127.0.0.1 (slurmdbd's way). ``socket_user`` is the system user whose
    unix socket login is the database's root (the one running mariadbd)."""
    lines = ["CREATE DATABASE IF NOT EXISTS mysql;", "USE mysql;",
             f"SET @auth_root_socket='{socket_user}';", *system_tables,
             "-- Bootstrap runs without the grant tables loaded; CREATE USER needs them.", "FLUSH PRIVILEGES;"]
    for host in ("localhost", "127.0.0.1"):
        lines.append(f"CREATE USER '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';")
        lines.append(f"GRANT ALL ON `{DB_NAME}`.* TO '{DB_USER}'@'{host}';")
    return "\n".join(lines) + "\n"


def register_commands(cluster_name: str, user: str) -> str:
    """sacctmgr commands (for `sacctmgr -i` on stdin) that add the cluster, the simcluster
    account and ``user`` with that account as their default."""
    return (f"add cluster {cluster_name}\n"
            f"add account {ACCOUNT} Cluster={cluster_name} Description=simcluster Organization=simcluster\n"
            f"add user {user} Account={ACCOUNT} DefaultAccount={ACCOUNT} Cluster={cluster_name}\n")


# sacctmgr reading commands from stdin exits 0 even where it refused one: its words say so.
_REFUSALS = ("error:", "unknown option", "doesn't exist", "does not exist", "bad qos")


def refused(output: str) -> str:
    """The first line in which sacctmgr refused a command, or ''."""
    for line in output.splitlines():
        if any(r in line.lower() for r in _REFUSALS):
            return line.strip().replace("sacctmgr: error: ", "")
    return ""


def constants() -> Dict[str, List[str]]:
    """The names and options above, for the Ansible roles (the simcluster_accounting filter)."""
    return {"account": ACCOUNT, "db_user": DB_USER, "db_name": DB_NAME, "sql_dirs": list(SQL_DIRS),
            "system_tables_sql": list(SYSTEM_TABLES_SQL), "system_tables_sql_11": list(SYSTEM_TABLES_SQL_11),
            "server_options": list(SERVER_OPTIONS),
            "bootstrap_options": list(BOOTSTRAP_OPTIONS)}
