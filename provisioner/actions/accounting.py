"""Accounting (accounting: true): a private MariaDB, slurmdbd, and the cluster's associations.

Order matters. The database and slurmdbd come up before slurmctld, and the cluster, an
account and the user are added before slurmctld first connects, so its registration
finds them and every job is charged to an association from the start. `up` is ready
only once slurmctld has registered with slurmdbd (`sacctmgr show cluster` gives its
control port): until then job records queue inside slurmctld and `sacct` shows nothing,
the flakiness other projects' CI ran into.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from typing import Dict, List, Optional, Tuple

from provisioner.actions import mariadb
from provisioner.actions.context import UpContext
from provisioner.actions.preflight import find_binary
from provisioner.errors import PrerequisiteError, StartupError
from provisioner.procs import pid_alive, spawn, tail
from provisioner.render import AccountingInputs
from provisioner.slurm import run_client
from provisioner.state import ClusterState
from provisioner.wait import WaitTimeout, poll_until

ACCOUNT = "simcluster"  # every user of the cluster is charged to it by default
REQUIRED_BINARIES = {
    "mariadbd": "mariadb-server-core",
    "mariadb-install-db": "mariadb-server-core",
    "my_print_defaults": "mariadb-client-core",  # mariadb-install-db calls it
    "slurmdbd": "slurmdbd",
    "sacctmgr": "slurm-client",
    "sacct": "slurm-client",
}


def check_prerequisites() -> None:
    missing = [b for b in REQUIRED_BINARIES if not find_binary(b)]
    if missing:
        pkgs = " ".join(sorted({REQUIRED_BINARIES[b] for b in missing}))
        raise PrerequisiteError(f"accounting needs program(s) that are missing: {', '.join(missing)}",
                                f"run 'make setup' or 'sudo apt-get install {pkgs}'")


def plan(ctx: UpContext) -> AccountingInputs:
    """Ports from the state, and a fresh database password that only slurmdbd.conf keeps."""
    st = ctx.state
    return AccountingInputs(dbd_port=st.slurmdbd_port, storage_port=st.mariadb_port,
                            storage_pass=secrets.token_hex(16), storage_user=mariadb.DB_USER,
                            storage_loc=mariadb.DB_NAME)


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_slurmdbd(ctx: UpContext, timeout: float = 30.0) -> None:
    """`slurmdbd -D`: it finds slurmdbd.conf next to $SLURM_CONF (it has no -f option)."""
    layout = ctx.layout
    log = layout.daemon_log("slurmdbd")
    # With no config path among its arguments nothing in slurmdbd's command line would name
    # the cluster; started through a link in the state dir it shows in `ps` like the others.
    link = layout.run / "slurmdbd"
    link.symlink_to(find_binary("slurmdbd") or "/usr/sbin/slurmdbd")
    ctx.record("slurmdbd", spawn([str(link), "-D"], layout.log / "slurmdbd.out", ctx.daemon_env()))

    def ready() -> Tuple[bool, str]:
        proc = ctx.daemons["slurmdbd"]
        if proc.poll() is not None:
            out = tail(layout.log / "slurmdbd.out")
            raise StartupError(f"slurmdbd exited during startup (exit code {proc.returncode})",
                               f"see {log}", details=f"{tail(log)}\n{out}".strip())
        # slurmdbd listens only after it has connected to MariaDB and created its tables.
        return _port_open(ctx.state.slurmdbd_port), "port not open"

    try:
        poll_until(ready, timeout, first_delay=0.02)
    except WaitTimeout as exc:
        raise StartupError(f"slurmdbd did not open port {ctx.state.slurmdbd_port} within {exc.waited:.0f}s",
                           f"see {log}", details=tail(log)) from None


def accounts_file(cluster: str, user: str) -> str:
    """The `sacctmgr load` file that adds the cluster, the simcluster account and ``user``."""
    return (f"Cluster - '{cluster}'\n"
            "Parent - 'root'\n"
            f"Account - '{ACCOUNT}':Description='simcluster':Organization='simcluster'\n"
            f"Parent - '{ACCOUNT}'\n"
            f"User - '{user}':DefaultAccount='{ACCOUNT}'\n")


def _setup_input(ctx: UpContext) -> Tuple[List[str], Optional[str]]:
    """sacctmgr arguments and stdin that add the cluster, the account and the user.

    A request to slurmdbd costs up to ~90 ms on loopback (Slurm writes a message in several
    small pieces and TCP delays the ACKs), so fewer requests is faster: `sacctmgr load` of a
    flat file needs ~13, three add commands ~18. But `load` refuses a user who is not yet
    in the database, and only root is in a new one; rootless, the add commands are read
    from stdin by one sacctmgr process.
    """
    name, user = ctx.spec.name, ctx.state.user
    sacctmgr = find_binary("sacctmgr") or "sacctmgr"
    if os.getuid() == 0:
        flat = ctx.layout.etc / "accounts.cfg"
        flat.write_text(accounts_file(name, user))
        return [sacctmgr, "-i", "load", f"file={flat}"], None
    return [sacctmgr, "-i"], (f"add cluster {name}\n"
                              f"add account {ACCOUNT} Cluster={name} Description=simcluster Organization=simcluster\n"
                              f"add user {user} Account={ACCOUNT} DefaultAccount={ACCOUNT} Cluster={name}\n")


def register(ctx: UpContext, timeout: float = 60.0) -> None:
    """Add the cluster, the account and the user (with that account as their default)."""
    argv, stdin = _setup_input(ctx)
    log = ctx.layout.log / "sacctmgr-setup.log"
    try:
        proc = subprocess.run(argv, input=stdin, env=ctx.daemon_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StartupError(f"sacctmgr did not answer within {timeout:.0f}s",
                           details=tail(ctx.layout.daemon_log("slurmdbd"))) from None
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        raise StartupError(f"registering cluster '{ctx.spec.name}' in accounting failed (sacctmgr exit code "
                           f"{proc.returncode})", f"see {log}", details=proc.stdout[-2000:])


def start(ctx: UpContext, acct: AccountingInputs) -> None:
    """Everything before slurmctld: database, slurmdbd, associations (one progress line each)."""
    with ctx.step("creating the accounting database"):
        mariadb.install(ctx, acct.storage_pass)
    with ctx.step(f"starting MariaDB on port {acct.storage_port}"):
        mariadb.start(ctx, acct.storage_port)
        ctx.state.save()
    with ctx.step(f"starting slurmdbd on port {acct.dbd_port}"):
        start_slurmdbd(ctx)
        ctx.state.save()
    with ctx.step(f"adding cluster '{ctx.spec.name}', account '{ACCOUNT}' and user '{ctx.state.user}'"):
        register(ctx)


def registered_port_argv(name: str) -> List[str]:
    """The sacctmgr command whose output parse_registered_port reads."""
    return ["sacctmgr", "-n", "-P", "show", "cluster", name, "format=Cluster,ControlPort"]


def registered_port(slurm_conf, name: str, timeout: float = 10.0) -> Optional[int]:
    """slurmctld's port as slurmdbd recorded it for cluster ``name``; None if not (yet) there."""
    try:
        proc = run_client(slurm_conf, registered_port_argv(name), timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return parse_registered_port(proc.stdout, name)


def parse_registered_port(stdout: str, name: str) -> Optional[int]:
    for line in stdout.splitlines():
        cluster, _, port = line.partition("|")
        if cluster == name and port.strip().isdecimal() and int(port) > 0:
            return int(port)
    return None


def wait_registered(ctx: UpContext, timeout: float) -> None:
    """The readiness gate's last part: slurmctld has registered with slurmdbd."""
    want = ctx.state.controller_port

    def check() -> Tuple[bool, Optional[int]]:
        for key in ("mariadbd", "slurmdbd", "slurmctld"):
            proc = ctx.daemons.get(key)
            if proc is not None and proc.poll() is not None:
                log = ctx.layout.daemon_log(key)
                raise StartupError(f"{key} exited (exit code {proc.returncode})", f"see {log}",
                                   details=tail(log))
        port = registered_port(ctx.layout.slurm_conf, ctx.spec.name)
        return port == want, port

    try:
        poll_until(check, timeout, first_delay=0.05, max_delay=0.25)
    except WaitTimeout as exc:
        raise StartupError(
            f"cluster '{ctx.spec.name}' is not registered in accounting after {exc.waited:.0f}s "
            f"(slurmdbd reports control port {exc.last_seen or 'none'}, slurmctld listens on {want})",
            "raise --wait, or look at the logs below",
            details=f"--- tail of slurmdbd.log ---\n{tail(ctx.layout.daemon_log('slurmdbd'), 15)}\n"
                    f"--- tail of slurmctld.log ---\n{tail(ctx.layout.daemon_log('slurmctld'), 15)}") from None


def health(st: ClusterState) -> Dict:
    """What `status` reports about accounting: daemons alive, cluster registered."""
    if not st.cluster_spec.accounting:
        return {"enabled": False}
    mariadb_alive = pid_alive(st.pids.get("mariadbd"))
    dbd_alive = pid_alive(st.pids.get("slurmdbd"))
    port = registered_port(st.layout.slurm_conf, st.name) if dbd_alive and mariadb_alive else None
    registered = port == st.controller_port
    return {"enabled": True, "healthy": mariadb_alive and dbd_alive and registered,
            "registered": registered, "account": ACCOUNT,
            "slurmdbd": {"alive": dbd_alive, "port": st.slurmdbd_port},
            "mariadb": {"alive": mariadb_alive, "port": st.mariadb_port,
                        "socket": str(mariadb.socket_path(st.layout))}}


# What export-logs adds for accounting clusters: the database's view of the cluster.
DEBUG_REPORTS = (("sacctmgr-show-cluster.txt", ["sacctmgr", "show", "cluster"]),
                 ("sacctmgr-show-assoc.txt", ["sacctmgr", "show", "assoc"]),
                 ("sshare.txt", ["sshare", "-a", "-l"]),
                 ("sacct.txt", ["sacct", "-a", "--starttime=now-1days",
                                "--format=JobID,JobName,User,Account,State,ExitCode,NodeList,Elapsed"]))


def report_text(proc: subprocess.CompletedProcess) -> str:
    """A report command's output for export-logs, with its exit status and stderr if it failed."""
    return proc.stdout + (f"\n(exit {proc.returncode}: {proc.stderr.strip()})" if proc.returncode else "")


def debug_reports(st: ClusterState) -> Dict[str, str]:
    """What export-logs adds for accounting: the database's view of the cluster."""
    reports = {}
    for rel, argv in DEBUG_REPORTS:
        try:
            proc = run_client(st.layout.slurm_conf, argv, timeout=15)
            reports[rel] = report_text(proc)
        except (subprocess.TimeoutExpired, OSError) as exc:
            reports[rel] = f"({' '.join(argv)} failed: {exc})"
    return reports
