"""A private MariaDB server per cluster, the database behind slurmdbd.

Nothing system-wide is read or changed: --no-defaults skips /etc/mysql, and the data
directory, socket, pid file and logs all live in the cluster's directory; the server
listens on 127.0.0.1 only, on a port picked for this cluster. `down` kills it and
deletes the data with the rest of the cluster. A system MariaDB, if one runs, is never
used.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List, Optional, Tuple

from provisioner.actions.context import UpContext
from provisioner.actions.preflight import find_binary
from provisioner.errors import StartupError
from provisioner.paths import ClusterLayout
from provisioner.procs import spawn, tail
from provisioner.wait import WaitTimeout, poll_until

# Where Debian (and most distributions) keep the SQL that mariadb-install-db feeds the server.
SQL_DIRS = ("/usr/share/mysql", "/usr/share/mariadb")
SYSTEM_TABLES_SQL = ("mysql_system_tables.sql", "mysql_performance_tables.sql", "mysql_system_tables_data.sql")
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"

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


def db_dir(layout: ClusterLayout) -> Path:
    return layout.root / "mariadb"


def data_dir(layout: ClusterLayout) -> Path:
    return db_dir(layout) / "data"


def socket_path(layout: ClusterLayout) -> Path:
    # Shorter than the munge socket's path, which preflight already checks against the
    # 107-character limit of unix socket paths.
    return db_dir(layout) / "db.sock"


def _as_root_options(user: str) -> List[str]:
    """mariadbd refuses to run as root unless told to; as anyone else it needs nothing."""
    return [f"--user={user}"] if os.getuid() == 0 else []


# mariadbd --bootstrap options beyond the server's: quiet, any storage engine, room for the SQL.
BOOTSTRAP_OPTIONS = ["--log-warnings=0", "--enforce-storage-engine=", "--max-allowed-packet=8M"]


def bootstrap_header(user: str) -> str:
    """What mariadb-install-db feeds the server before the system tables' SQL
    (``user`` gets root's unix-socket login)."""
    return f"CREATE DATABASE IF NOT EXISTS mysql;\nUSE mysql;\nSET @auth_root_socket='{user}';\n"


def init_sql(password: str) -> str:
    """The slurm database user, for the socket and for TCP from 127.0.0.1 (slurmdbd's way)."""
    lines = ["-- Bootstrap runs without the grant tables loaded; CREATE USER needs them.",
             "FLUSH PRIVILEGES;"]
    for host in ("localhost", "127.0.0.1"):
        lines.append(f"CREATE USER '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';")
        lines.append(f"GRANT ALL ON `{DB_NAME}`.* TO '{DB_USER}'@'{host}';")
    return "\n".join(lines) + "\n"


def _system_tables_sql(user: str) -> Optional[str]:
    """The SQL that creates MariaDB's system tables, as mariadb-install-db would feed it.

    Only the tables a server needs: mariadb-install-db also loads the help tables and the
    sys schema (3 MB of SQL), four times the CPU time, which on a busy CI machine is seconds.
    None if this MariaDB keeps its SQL elsewhere (then mariadb-install-db does it all).
    """
    for base in SQL_DIRS:
        paths = [Path(base) / name for name in SYSTEM_TABLES_SQL]
        if all(p.is_file() for p in paths):
            return bootstrap_header(user) + "".join(p.read_text() for p in paths)
    return None


def install(ctx: UpContext, password: str, timeout: float = 120.0) -> None:
    """Create the system tables and the slurm user in a fresh data directory."""
    layout = ctx.layout
    data = data_dir(layout)
    data.mkdir(parents=True, exist_ok=True)
    os.chmod(db_dir(layout), 0o700)
    user = ctx.state.user
    system_sql = _system_tables_sql(user)
    log = layout.log / "mariadb-install.log"
    if system_sql is not None:
        # The password goes through a pipe, never into a file or a command line.
        argv = [find_binary("mariadbd") or "mariadbd", "--no-defaults", "--bootstrap", f"--datadir={data}",
                *BOOTSTRAP_OPTIONS, *_as_root_options(user), *SERVER_OPTIONS]
        _run(argv, system_sql + init_sql(password), log, ctx.daemon_env(), timeout)
        return
    init_file = db_dir(layout) / "init.sql"  # holds the password: 0600, deleted right after
    fd = os.open(init_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(init_sql(password))
    argv = [find_binary("mariadb-install-db") or "mariadb-install-db", "--no-defaults",
            f"--datadir={data}", "--auth-root-authentication-method=socket",
            f"--auth-root-socket-user={user}", "--skip-test-db", "--skip-name-resolve",
            f"--extra-file={init_file}", *_as_root_options(user), *SERVER_OPTIONS]
    try:
        _run(argv, None, log, ctx.daemon_env(), timeout)
    finally:
        init_file.unlink(missing_ok=True)


def _run(argv: List[str], stdin: Optional[str], log: Path, env, timeout: float) -> None:
    name = Path(argv[0]).name + (" --bootstrap" if "--bootstrap" in argv else "")
    try:
        with open(log, "ab") as out:
            proc = subprocess.run(argv, input=(stdin or "").encode(), stdout=out, stderr=subprocess.STDOUT,
                                  env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StartupError(f"{name} did not finish within {timeout:.0f}s", f"see {log}",
                           details=tail(log)) from None
    if proc.returncode != 0:
        raise StartupError(f"creating the accounting database failed ({name} exit code {proc.returncode})",
                           f"see {log}", details=tail(log))


def start(ctx: UpContext, port: int, timeout: float = 30.0) -> None:
    """Start mariadbd in the foreground of its own session; return once its socket exists."""
    layout = ctx.layout
    sock = socket_path(layout)
    log = layout.daemon_log("mariadbd")
    argv = [find_binary("mariadbd") or "mariadbd", "--no-defaults", f"--datadir={data_dir(layout)}",
            f"--socket={sock}", f"--port={port}", "--bind-address=127.0.0.1",
            f"--pid-file={layout.run / 'mariadbd.pid'}", f"--log-error={log}",
            *_as_root_options(ctx.state.user), *SERVER_OPTIONS]
    ctx.record("mariadbd", spawn(argv, layout.log / "mariadbd.out", ctx.daemon_env()))

    def ready() -> Tuple[bool, str]:
        proc = ctx.daemons["mariadbd"]
        if proc.poll() is not None:
            raise StartupError(f"mariadbd exited during startup (exit code {proc.returncode})",
                               f"see {log}", details=tail(log))
        # The TCP listener is opened before the socket file; connections made before
        # "ready for connections" wait in the backlog, so this is early enough.
        return sock.exists(), "socket not created yet"

    try:
        poll_until(ready, timeout, first_delay=0.01)
    except WaitTimeout as exc:
        raise StartupError(f"mariadbd did not create its socket within {exc.waited:.0f}s",
                           f"see {log}", details=tail(log)) from None
