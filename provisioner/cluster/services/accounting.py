"""Accounting (accounting: true): a private MariaDB, slurmdbd, and the cluster's associations.

Order matters. The database and slurmdbd come up before slurmctld, and the cluster, an
account and the user are added before slurmctld first connects, so its registration
finds them and every job is charged to an association from the start. `up` is ready
only once slurmctld has registered with slurmdbd (`sacctmgr show cluster` gives its
control port): until then job records queue inside slurmctld and `sacct` shows nothing.

Nothing system-wide is read or changed: mariadbd runs with --no-defaults, its data,
socket and logs in the cluster's database directory, listening on 127.0.0.1 only. The
SQL that creates the database exists only here, for every backend.
"""

from __future__ import annotations

import secrets
import shlex
from typing import Dict, Iterable, List, Optional, Tuple

from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.wait import WaitStrategy, daemons_guard
from provisioner.cluster.services import daemons
from provisioner.cluster.services.accounting_sql import (ACCOUNT, BOOTSTRAP_OPTIONS, DB_NAME, DB_USER, SERVER_OPTIONS,  # noqa: F401
                                                 SQL_DIRS, SYSTEM_TABLES_SQL, SYSTEM_TABLES_SQL_11, bootstrap_sql, refused,
                                                 register_commands)
from provisioner.config.types import ClusterSpec
from provisioner.errors import StartupError
from provisioner.render import AccountingInputs

# Where every accounting start-up error sends the user (MariaDB, slurmdbd, sacctmgr).
ACCOUNTING_DOC = "docs/troubleshooting.md#accounting-does-not-start"

REQUIRED_BINARIES = {
    "mariadbd": "mariadb-server-core",
    "slurmdbd": "slurmdbd",
    "sacctmgr": "slurm-client",
    "sacct": "slurm-client",
}


def inputs(cluster: Cluster, password: str = "") -> AccountingInputs:
    """Where slurmdbd and the database listen, with ``password`` for the database user."""
    pl = cluster.placement
    base = pl.render.accounting or AccountingInputs()
    return AccountingInputs(dbd_port=pl.dbd_port, storage_port=pl.storage_port, storage_pass=password,
                            dbd_host=base.dbd_host, dbd_addr=base.dbd_addr, storage_user=DB_USER,
                            storage_loc=DB_NAME)


def new_password() -> str:
    """A fresh database password; only slurmdbd.conf (mode 0600) keeps it."""
    return secrets.token_hex(16)


def _as_root(cluster: Cluster) -> List[str]:
    """mariadbd refuses to run as root unless told to; as anyone else it needs nothing."""
    return ["--user=root"] if cluster.placement.daemon_user == "root" else []


def init_sql(cluster: Cluster, password: str) -> str:
    """What mariadb-install-db would feed the server (the tables a server needs, without the
    help tables and sys schema: a quarter of the CPU time), then the slurm database user for
    the socket and for TCP from 127.0.0.1 (slurmdbd's way)."""
    runner = cluster.runner()
    for base, names in ((b, n) for b in SQL_DIRS for n in (SYSTEM_TABLES_SQL, SYSTEM_TABLES_SQL_11)):
        parts = [runner.read_text(f"{base}/{name}") for name in names]
        if all(p is not None for p in parts):
            break
    else:
        raise StartupError("MariaDB's system tables SQL was not found", f"looked in {', '.join(SQL_DIRS)} "
                           f"({runner.where}); install mariadb-server-core",
                           doc=ACCOUNTING_DOC)
    return bootstrap_sql(parts, cluster.placement.daemon_user, password)


def create_database(cluster: Cluster, password: str, timeout: float = 120.0) -> None:
    """Create the system tables and the slurm user in a fresh data directory."""
    runner, db = cluster.runner(), cluster.paths.db_dir
    runner.run(["mkdir", "-p", "-m", "0700", db, f"{db}/data"], timeout=10)
    # The password goes through a pipe, never into a file or a command line.
    res = runner.run([runner.program("mariadbd"), "--no-defaults", "--bootstrap", f"--datadir={db}/data",
                      *BOOTSTRAP_OPTIONS,
                      *_as_root(cluster), *SERVER_OPTIONS], stdin=init_sql(cluster, password), timeout=timeout,
                     env=cluster.daemon_env())
    log = f"{cluster.paths.log}/mariadb-install.log"
    runner.write_file(log, (res.stdout + res.stderr).encode(), 0o644)
    if not res.ok:
        raise StartupError(f"creating the accounting database failed (mariadbd --bootstrap exit code {res.rc})",
                           f"see {log} ({runner.where})", details=(res.stderr or res.stdout)[-2000:],
                           doc=ACCOUNTING_DOC)


def start_mariadb(cluster: Cluster, timeout: float = 30.0) -> None:
    p, db = cluster.paths, cluster.paths.db_dir
    daemons.start(cluster, "mariadbd", [
        *cluster.placement.controller_prefix, daemons.program(cluster, "mariadbd", "mariadbd"), "--no-defaults", f"--datadir={db}/data",
        f"--socket={db}/db.sock",
        f"--port={cluster.placement.storage_port}", "--bind-address=127.0.0.1", f"--pid-file={p.run}/mariadbd.pid",
        f"--log-error={p.daemon_log('mariadbd')}", *_as_root(cluster), *SERVER_OPTIONS])
    # The TCP listener is opened before the socket file; connections made before "ready for
    # connections" wait in the backlog, so the socket is early enough.
    runner = cluster.runner()
    daemons.wait_usable(cluster, "mariadbd", "create its socket", lambda: runner.exists(f"{db}/db.sock"), timeout)


def start_slurmdbd(cluster: Cluster, timeout: float = 30.0) -> None:
    runner = cluster.runner()
    link = f"{cluster.paths.run}/slurmdbd"
    # The link's target by absolute path: this host's (found whatever the caller's PATH), or,
    # where the runner leaves it to its machine (a container), that machine's.
    exe = runner.program("slurmdbd")
    target = shlex.quote(exe) if exe.startswith("/") else '"$(command -v slurmdbd || echo /usr/sbin/slurmdbd)"'
    runner.run(["sh", "-c", f'ln -sf {target} {link}'], timeout=10)
    daemons.start(cluster, "slurmdbd", daemons.slurmdbd_argv(cluster))
    port = cluster.placement.dbd_port
    # slurmdbd listens only after it has connected to MariaDB and created its tables.
    addr = cluster.placement.controller_addr
    daemons.wait_usable(cluster, "slurmdbd", f"listen on port {port}", lambda: runner.listening(port, addr), timeout)


def accounts_file(cluster_name: str, user: str) -> str:
    """The `sacctmgr load` file that adds the cluster, the simcluster account and ``user``."""
    return (f"Cluster - '{cluster_name}'\n"
            "Parent - 'root'\n"
            f"Account - '{ACCOUNT}':Description='simcluster':Organization='simcluster'\n"
            f"Parent - '{ACCOUNT}'\n"
            f"User - '{user}':DefaultAccount='{ACCOUNT}'\n")


def spec_commands(spec: ClusterSpec, user: str, known_users: Iterable[str]) -> str:
    """sacctmgr commands (one per line, for `sacctmgr -i` on stdin) that make the spec's QoS
    and accounts, after the cluster, the simcluster account and ``user`` exist.

    QoS first (an account's QOS= must name existing ones), each added bare and then set,
    so `Preempt=` may name a QoS listed after it; `normal` exists already and is only set.
    ``user`` joins every account; the users an account lists join it where they are in
    ``known_users`` (this host's), as sacctmgr would otherwise ask about a user without uid.
    Each of the spec's ``users`` (checked to exist before `up` made anything) gets an account
    of their own name, their default account.
    """
    lines: List[str] = []
    names = [q.name for q in spec.qos]
    # Each command is a commit in slurmdbd (~0.4 s here): as few as the order allows. Preempt=
    # is set once every QoS exists: sacctmgr 22.05 prints an `add qos` with Preempt= as
    # added, but the QoS is not there afterwards.
    for q in spec.qos:
        sets = []
        if q.priority is not None:
            sets.append(f"Priority={q.priority}")
        if q.preempt_mode:
            sets.append(f"PreemptMode={q.preempt_mode}")
        if q.grace_time is not None:
            sets.append(f"GraceTime={q.grace_time}")
        if q.flags:
            sets.append(f"Flags={','.join(q.flags)}")
        sets += [f"{k}={shlex.quote(v)}" for k, v in q.limits if not is_tres_limit(k)]
        if q.name != "normal":
            lines.append(" ".join([f"add qos {q.name}", *sets]))
        elif sets:
            lines.append(f"modify qos where name=normal set {' '.join(sets)}")
    for q in spec.qos:
        if q.preempt:
            lines.append(f"modify qos where name={q.name} set Preempt={','.join(q.preempt)}")
    all_qos = ",".join(["normal"] + [n for n in names if n != "normal"])
    if spec.qos:
        # Jobs without -A run in the default account: it may use every QoS too.
        lines.append(f"modify account where name={ACCOUNT} cluster={spec.name} set QOS={all_qos}")
    known = set(known_users) | set(spec.users)
    members: Dict[str, List[str]] = {}
    # Each of the spec's users has an account of their own name, their default: fair share
    # and a partition's AllowAccounts then tell them apart. An account the spec lists under
    # that name is theirs (its fairshare and QoS apply); otherwise it is made under root.
    spec_accounts = {a.name for a in spec.accounts}
    for u in spec.users:
        members[u] = [u]
    for a in spec.accounts:
        opts = [f"Cluster={spec.name}", f"Parent={a.parent or 'root'}", f"Description={a.name}",
                f"Organization={a.name}", f"QOS={','.join(a.qos) if a.qos else all_qos}"]
        if a.fairshare is not None:
            opts.append(f"Fairshare={a.fairshare}")
        if a.default_qos:
            opts.append(f"DefaultQOS={a.default_qos}")
        lines.append(f"add account {a.name} {' '.join(opts)}")
        for u in dict.fromkeys((user, *(x for x in a.users if x in known))):
            if a.name not in members.setdefault(u, []):
                members[u].append(a.name)
    for u in spec.users:
        if u not in spec_accounts:
            lines.append(f"add account {u} Cluster={spec.name} Parent=root Description={u} Organization={u} "
                         f"QOS={all_qos}")
    for u, accounts in members.items():
        default = f" DefaultAccount={u}" if u in spec.users else ""
        lines.append(f"add user {u} Account={','.join(accounts)}{default} Cluster={spec.name}")
    return "\n".join(lines) + "\n" if lines else ""


# sacctmgr reading commands from stdin exits 0 even where it refused one: refused() reads its words.
_refused = refused


def is_tres_limit(key: str) -> bool:
    """A QoS limit counted in TRES (MaxTRESPerUser=gres/gpu=16): it can name gres/gpu only
    once slurmctld has registered the cluster's TRES (AccountingStorageTRES) in slurmdbd."""
    return "tres" in key.lower()


def tres_limit_commands(spec: ClusterSpec) -> str:
    """sacctmgr commands that set the spec's TRES limits of QoS (after registration)."""
    lines = []
    for q in spec.qos:
        sets = [f"{k}={shlex.quote(v)}" for k, v in q.limits if is_tres_limit(k)]
        if sets:
            lines.append(f"modify qos where name={q.name} set {' '.join(sets)}")
    return "\n".join(lines) + "\n" if lines else ""


def set_tres_limits(cluster: Cluster, timeout: float = 60.0) -> None:
    """The QoS limits counted in TRES, once slurmctld has registered (wait_registered)."""
    commands = tres_limit_commands(cluster.spec)
    res = cluster.client.run(["sacctmgr", "-i"], stdin=commands, timeout=timeout)
    log = f"{cluster.paths.log}/sacctmgr-setup.log"
    runner = cluster.runner()
    before = runner.read_text(log) or ""
    output = before + commands + res.stdout + res.stderr
    runner.write_file(log, output.encode(), 0o644)
    if not res.ok or _refused(res.stdout + res.stderr):
        raise StartupError(f"setting the QoS limits of cluster '{cluster.name}' failed",
                           f"see {log}; TRES are named like gres/gpu=16, cpu=64, mem=500G, node=4",
                           details=(res.stdout + res.stderr)[-2000:],
                           doc=ACCOUNTING_DOC)


def unknown_users(spec: ClusterSpec, known_users: Iterable[str]) -> List[str]:
    """Users the spec's accounts list who have no account on the cluster's machine."""
    known = set(known_users)
    return sorted({u for a in spec.accounts for u in a.users if u not in known})


def _host_users(cluster: Cluster) -> List[str]:
    """Which of the users the spec's accounts name exist where the daemons run."""
    wanted = sorted({u for a in cluster.spec.accounts for u in a.users})
    if not wanted:
        return []
    res = cluster.runner().run(["getent", "passwd", *wanted], timeout=10)
    return [line.split(":", 1)[0] for line in res.stdout.splitlines() if ":" in line]


def register_title(cluster: Cluster) -> str:
    """What `up` says while register() runs."""
    spec = cluster.spec
    extra = [f"{len(x)} {what}" for x, what in ((spec.qos, "QoS"), (spec.accounts, "accounts")) if x]
    if spec.users:
        extra.append(f"{len(spec.users)} user account{'s' if len(spec.users) > 1 else ''}")
    return (f"adding cluster '{cluster.name}', account '{ACCOUNT}' and user '{cluster.placement.daemon_user}'"
            + (f", then {' and '.join(extra)}" if extra else ""))


def register(cluster: Cluster, timeout: float = 60.0) -> None:
    """Add the cluster, the account and the user (with that account as their default).

    A request to slurmdbd costs up to ~90 ms on loopback, so fewer requests is faster:
    `sacctmgr load` of a flat file needs ~13, three add commands ~18. But `load` refuses a
    user who is not yet in the database, and only root is in a new one; for anyone else
    the add commands are read from stdin by one sacctmgr process.
    """
    name, user = cluster.name, cluster.placement.daemon_user
    if user == "root":
        argv, stdin = ["sacctmgr", "-i", "load", f"file={cluster.paths.etc}/accounts.cfg"], None
    else:
        argv, stdin = ["sacctmgr", "-i"], register_commands(name, user)
    res = cluster.client.run(argv, stdin=stdin, timeout=timeout)
    output = res.stdout + res.stderr
    log = f"{cluster.paths.log}/sacctmgr-setup.log"
    if res.ok and (cluster.spec.accounts or cluster.spec.qos or cluster.spec.users):
        # The spec's QoS and accounts, by one more sacctmgr reading its commands from stdin.
        known = _host_users(cluster)
        commands = spec_commands(cluster.spec, user, known)
        res = cluster.client.run(["sacctmgr", "-i"], stdin=commands, timeout=timeout)
        output += commands + res.stdout + res.stderr
        refused = _refused(res.stdout + res.stderr)
        if refused:
            raise StartupError(f"making the spec's QoS, accounts and users failed: {refused}",
                               "check the qos, accounts and users of the spec (docs/config.md#accounts-and-qos)",
                               details=(res.stdout + res.stderr)[-2000:],
                               doc=ACCOUNTING_DOC)
        missing = unknown_users(cluster.spec, known)
        if missing:
            output += f"left out (no such user here): {', '.join(missing)}\n"
    cluster.runner().write_file(log, output.encode(), 0o644)
    if not res.ok:
        raise StartupError(f"registering cluster '{name}' in accounting failed (sacctmgr exit code {res.rc})",
                           f"see {log}", details=output[-2000:],
                           doc=ACCOUNTING_DOC)


def wait_registered(cluster: Cluster, timeout: float) -> None:
    """The readiness gate's last part: slurmctld has registered with slurmdbd."""
    want = cluster.state.controller_port
    client = cluster.client

    def check() -> Tuple[bool, Optional[int]]:
        port = client.registered_port(cluster.name)
        return port == want, port

    WaitStrategy(f"cluster '{cluster.name}' to register in accounting", check, timeout, first_delay=0.05,
                 max_delay=0.25, guard=daemons_guard(cluster, ["mariadbd", "slurmdbd", "slurmctld"]),
                 describe=lambda seen: f"slurmdbd reports control port {seen or 'none'}, slurmctld listens on {want}",
                 logs=lambda: cluster.log_tail("slurmdbd", 15) + "\n" + cluster.log_tail("slurmctld", 15)).wait()


def health(cluster: Cluster, alive: Dict[str, bool]) -> Dict:
    """What `status` reports about accounting: daemons alive, cluster registered."""
    if not cluster.spec.accounting:
        return {"enabled": False, "healthy": True, "registered": None, "account": None,
                "slurmdbd": {"alive": None, "port": None}, "mariadb": {"alive": None, "port": None}}
    db_alive, dbd_alive = alive.get("mariadbd", False), alive.get("slurmdbd", False)
    port = cluster.client.registered_port(cluster.name) if db_alive and dbd_alive else None
    registered = port == cluster.state.controller_port
    return {"enabled": True, "healthy": db_alive and dbd_alive and registered, "registered": registered,
            "account": ACCOUNT, "slurmdbd": {"alive": dbd_alive, "port": cluster.placement.dbd_port},
            "mariadb": {"alive": db_alive, "port": cluster.placement.storage_port}}


# What export-logs adds for accounting clusters: the database's view of the cluster.
DEBUG_REPORTS = (("sacctmgr-show-cluster.txt", ["sacctmgr", "show", "cluster"]),
                 ("sacctmgr-show-assoc.txt", ["sacctmgr", "show", "assoc"]),
                 ("sshare.txt", ["sshare", "-a", "-l"]),
                 ("sacct.txt", ["sacct", "-a", "--starttime=now-1days",
                                "--format=JobID,JobName,User,Account,State,ExitCode,NodeList,Elapsed"]))
