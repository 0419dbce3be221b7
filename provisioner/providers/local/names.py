"""Names and addresses of the local backend's virtual nodes, as jobs see them.

Every virtual node gets an address of its own on the loopback network (127.B.x.y, one
block 127.B.0.0/16 per cluster; never 127.0.0.0/16, whose 127.0.1.1 Debian gives the host
name: loopback_addresses.py), so a process can bind its node's address and port while another node binds the
same port on its own address, and MASTER_ADDR differs from node to node.

Names resolve through the cluster's own hosts file. Where the kernel lets us, each slurmd
starts in a private mount namespace in which that file is bind-mounted over /etc/hosts
(`unshare`; rootless: in a user namespace that maps the user to itself), so jobs resolve
names with glibc itself, exactly as on separate hosts: a name gives its address once, a
numeric address gives itself once, and an IPv6 lookup with AI_V4MAPPED (torch's TCPStore
client asks that first, and retries until its timeout if it fails) gives ::ffff:<addr>.

With tini at hand each slurmd also gets a PID namespace (its node's own process table,
with tini as pid 1) and its spool directory becomes a tmpfs of that namespace; see
namespace_prefix.

Where namespaces are refused (some containers), the older way remains: libnss_wrapper,
preloaded into every task by the TaskProlog. It cannot map IPv4 to IPv6, so the file then
carries ::ffff: lines too, and an unspecified-family lookup of a node name returns both
(docs/fidelity.md says what that breaks).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from provisioner.cluster.model.command_runner import descendant_pid as daemon_pid  # the slurmd behind namespace_prefix
from provisioner.cluster.model.command_runner import find_binary
from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.paths import REPO_ROOT


NAMESPACE = "mount-namespace"
NSS_WRAPPER = "nss_wrapper"


def _system_lines(text: str) -> List[Tuple[str, List[str]]]:
    """(address, names) of each line of a hosts file, comments and blanks dropped."""
    out = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2:
            out.append((fields[0], fields[1:]))
    return out


def hosts_file(node_addrs: Dict[str, str], system_hosts: Path = Path("/etc/hosts"),
               ipv6_mapped: bool = False) -> str:
    """The cluster's hosts file: one line per address, node names first, then the
    system's own names (localhost, this host's name) so they keep resolving.

    Lines of the system file that share an address are merged into one: libnss_wrapper
    answers a numeric lookup once per line that holds the address (127.0.0.1 came back
    five times), and one line per address is also what a tidy /etc/hosts has. Names of
    nodes are taken out of the system lines, so a node name has exactly one address.
    ``ipv6_mapped`` (libnss_wrapper only) adds ``::ffff:<addr> <node>`` lines, since that
    library cannot answer an IPv6 lookup with a mapped IPv4 address.
    """
    try:
        system = system_hosts.read_text()
    except OSError:
        system = "127.0.0.1 localhost\n"
    nodes = set(node_addrs)
    merged: Dict[str, List[str]] = {}
    for addr, names in _system_lines(system):
        kept = merged.setdefault(addr, [])
        kept.extend(n for n in names if n not in nodes and n not in kept)
    lines = ["# Hosts file of a simcluster cluster: its nodes, then this host's own names."]
    lines += [f"{addr} {name}" for name, addr in node_addrs.items()]
    lines += [f"{addr} {' '.join(names)}" for addr, names in merged.items() if names]
    if ipv6_mapped:
        lines += [f"::ffff:{addr} {name}" for name, addr in node_addrs.items() if ":" not in addr]
    return "\n".join(lines) + "\n"


# First the node's bind mounts, all of them with one `mount -a` (one program started per
# node, not one per mount: `up` starts every slurmd at once) from the cluster's fstab
# ("$0", made by node_fstab): the cluster's hosts file over /etc/hosts, its config
# directory over /etc/slurm, Open MPI's parameter file. Then the host name becomes the
# node's name, taken from the daemon's own `-N NODE` (slurmd's argv), so the prefix is the
# same for every node. {mount} is the program's absolute path, {hostname} SET_HOSTNAME (script()).
_NAMESPACE_SCRIPT = ('{mount} -a --no-canonicalize -T "$0" || exit 1; '
                     'prev=; for a in "$@"; do [ "$prev" = -N ] && {{ {hostname} || exit 1; }}; prev=$a; done; '
                     'exec "$@"')
# With a PID namespace (the node's processes live only as long as it), one more thing
# before the exec: "$1" (when not empty) is the cluster's spool directory, and the node's
# part of it, <$1>/<node>, becomes a tmpfs, as many clusters keep /var/spool/slurmd in
# memory: every job step writes there (its batch script, socket, topology file; slurmd
# rewrites its ~30 KB credential state per launch), and nothing there outlives the node's
# processes.
_NAMESPACE_PID_SCRIPT = ('{mount} -a --no-canonicalize -T "$0" || exit 1; spool=$1; shift; '
                         'prev=; for a in "$@"; do [ "$prev" = -N ] && {{ {hostname} || exit 1; '
                         '[ -z "$spool" ] || {mount} -t tmpfs -o mode=0755 simcluster-spool "$spool/$a" || exit 1; }}; '
                         'prev=$a; done; '
                         'exec "$@"')
_AFTER_MOUNT = '-T "$0" || exit 1; '
# A node with a cgroup namespace of its own (cgroup v2, cgroups_v2.create_v2): the host's
# /sys/fs/cgroup leaves the node's mount namespace before the fstab mounts the node's there
# (Slurm 24.11 takes the first cgroup2 line of /proc/1/mountinfo for its mount), and once it
# is mounted the node's pid 1 and this shell move from the cgroup the chain joined (the one
# for processes outside the node's PID namespace) into the node's init leaf: their pids as
# this namespace sees them ("init": cgroups_v2.V2_INIT; namespace_prefix fills in the pids).
_V2_BEFORE_MOUNT = "{umount} -l /sys/fs/cgroup 2>/dev/null; "
_V2_AFTER_MOUNT = "for p in {pids}; do echo $p > /sys/fs/cgroup/init/cgroup.procs || exit 1; done; "
# Where Slurm's commands look for slurm.conf when SLURM_CONF is not set (Debian's packages:
# slurm-client and slurmd ship the directory). A node's mount namespace gets the cluster's
# config directory over it; the host's own is never written to, and where the host has no
# such directory none is made (a mount needs a directory to cover): nodes then find the
# config through SLURM_CONF only, and the placement says so (etc_slurm_note).
ETC_SLURM = "/etc/slurm"
HOSTS = "/etc/hosts"
RESOLV_CONF = "/etc/resolv.conf"
RESOLV_FILE = "resolv.conf"  # the nodes' own, in the cluster's config directory
FSTAB_FILE = "node-mounts.fstab"  # in the cluster's config directory
CONTROLLER_FSTAB_FILE = "controller-mounts.fstab"  # the controller's (Slurm 24.11+): the nodes' mounts
# Nodes with GPUs: each node's own fstab (FSTAB_FILE's lines, then its gres.conf) and its
# gres.conf lines, in these directories of the config directory (node_gres_files).
NODE_FSTAB_DIR = "node-mounts.d"
NODE_GRES_DIR = "gres.d"


def _fstab_path(path: str) -> str:
    return "".join(f"\\{ord(ch):03o}" if ch in " \t\n\\" else ch for ch in path)


def node_resolv_conf() -> str:
    """/etc/resolv.conf for nodes with a network namespace each: the name servers of this
    host are out of their reach (no route off this host), and a lookup of a name that is
    not in their hosts file would wait for time-outs (glibc: 5 s per try, twice; `getent
    hosts node2` asks for IPv6 first and took 10 s, torch's rendezvous many times that).
    A name server on the node's own loopback answers at once that nothing listens."""
    return ("# simcluster: the nodes of this cluster reach no name server (their network ends at this host);\n"
            "# names outside the cluster's hosts file fail at once instead of after time-outs.\n"
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")


def node_fstab(mounts: List[Tuple[str, str]], extra: Optional[List[str]] = None) -> str:
    """The fstab that each node's namespace mounts (``mounts``: (file or directory, over
    what), in order), all bind mounts; paths escaped as fstab(5) wants (a space is \\040).
    ``extra``: whole fstab lines after them (the node's cgroup hierarchies)."""
    lines = ["# simcluster: mounts made in each node's own mount namespace (never the host's)."]
    lines += [f"{_fstab_path(src)} {_fstab_path(dst)} none bind 0 0" for src, dst in mounts]
    lines += list(extra or [])
    return "\n".join(lines) + "\n"


def node_gres_files(shared_fstab: str, gres_of: Dict[str, str], etc: str) -> Dict[str, str]:
    """The files that show each node a gres.conf of its own lines only (none for a node
    without GPUs; every node of ``gres_of`` gets its files): for node N with gres text T,
    NODE_GRES_DIR/N.conf = T and NODE_FSTAB_DIR/N.fstab = the shared fstab plus a bind of
    that file over ``etc``/gres.conf, the one slurmd reads (beside slurm.conf). Keys
    relative to the config directory ``etc``.

    Why: a node's GPUs are device files of its own, so gres.conf has a line per GPU per
    node, and every slurmd parses the whole file when it starts: at 256 nodes with a GPU
    each that doubled slurmd's start CPU (18-19 ms instead of 9-11). slurmd keeps only its
    own node's lines, so it reads the same GPUs. The bind comes last, after the config
    directory's own bind to /etc/slurm, which (a bind without its submounts) keeps showing
    jobs the cluster's whole gres.conf."""
    files: Dict[str, str] = {}
    for node, text in gres_of.items():
        own = f"{etc}/{NODE_GRES_DIR}/{node}.conf"
        files[f"{NODE_GRES_DIR}/{node}.conf"] = text
        files[f"{NODE_FSTAB_DIR}/{node}.fstab"] = (
            shared_fstab + f"{_fstab_path(own)} {_fstab_path(f'{etc}/gres.conf')} none bind 0 0\n")
    return files


# The node's host name ("$a", the value after -N) set by the shell itself: in the node's
# own UTS namespace /proc/sys/kernel/hostname is its host name, and writing it costs no
# program start (one `hostname` per node was ~1 ms of CPU; `up` starts every node at once).
SET_HOSTNAME = 'printf %s "$a" > /proc/sys/kernel/hostname'
# In a user namespace (rootless) that file stays the initial namespace's (EACCES), while
# sethostname(2) works on the UTS namespace the user namespace owns: `hostname NAME`.
SET_HOSTNAME_USERNS = '{prog} "$a"'


def script(template: str, user_namespace: bool = False) -> str:
    """A namespace script with its programs by absolute path (the caller's PATH may lack
    the directory: Debian's default PATH for users has no /usr/sbin or /sbin).
    ``user_namespace``: the script runs in a user namespace (rootless), where the host name
    is set with sethostname(2) (`hostname`), not through /proc/sys."""
    hostname = SET_HOSTNAME_USERNS.format(prog=shlex.quote(find_binary("hostname") or "hostname")) \
        if user_namespace else SET_HOSTNAME
    return template.format(mount=shlex.quote(find_binary("mount") or "mount"), hostname=hostname,
                           umount=shlex.quote(find_binary("umount") or "umount"))


def etc_slurm_note(in_namespace: bool, etc_slurm: Path = Path(ETC_SLURM)) -> str:
    """What the nodes see at /etc/slurm, said by `status` (empty: the cluster's config)."""
    if not in_namespace:
        return ("no namespaces here (libnss_wrapper): nodes see this host's /etc/slurm, not the cluster's; "
                "Slurm commands in jobs need SLURM_CONF")
    if not etc_slurm.is_dir():
        return (f"this host has no {etc_slurm} to mount the cluster's config over (simcluster does not create it): "
                "Slurm commands in jobs need SLURM_CONF")
    return ""


OPENMPI_PARAMS = "/etc/openmpi/openmpi-mca-params.conf"  # Debian's Open MPI (sysconfdir /etc/openmpi)
# What nodes of one host need (the TaskProlog's comment says why); the keys are taken out
# of the system's own file, the rest of it is kept. btl_tcp_if_include: the nodes' network.
OPENMPI_KEYS = ("btl_tcp_if_include", "btl")

# What status says where the nodes have no mount namespaces (libnss_wrapper): no network
# namespace or cgroup can be made for them either.
SHARED_NETWORK_NOTE = ("no namespaces here (libnss_wrapper): nodes share this host's network "
                       "(a loopback address each; ports can clash) and its host name (NodeHostname, sinfo %n)")
NO_CGROUPS_NOTE = "no namespaces here (libnss_wrapper): --mem, devices and cores are not enforced"

# Where an ordinary user gets no user namespace, the kernel setting that says so, and what
# the user (or an admin) can do about it.
USERNS_SETTINGS = (
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
     "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, "
     "Ubuntu 23.10+): an admin may allow them (sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"),
    ("/proc/sys/kernel/unprivileged_userns_clone", "0",
     "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0): an admin may turn them on "
     "(sysctl -w kernel.unprivileged_userns_clone=1)"),
    ("/proc/sys/user/max_user_namespaces", "0",
     "user namespaces are off (user.max_user_namespaces=0): an admin may allow some "
     "(sysctl -w user.max_user_namespaces=10000)"),
)


def userns_refusal(uid: int, settings=USERNS_SETTINGS) -> str:
    """Why an ordinary user (``uid`` not 0) got no namespaces here, and what to do, as a
    clause to add to the notes ("" for root: a container without CAP_SYS_ADMIN, said as it is)."""
    if uid == 0:
        return ""
    for path, value, why in settings:
        try:
            if open(path).read().strip() == value:
                return f" ({why}; or run up as root, or with --sudo)"
        except OSError:
            continue
    return (" (this host refuses ordinary users a user namespace with mount, UTS, PID and network "
            "namespaces: a container or seccomp policy without them; run up as root, or with --sudo)")


def openmpi_params(tcp_if: str = "lo", system: Path = Path(OPENMPI_PARAMS)) -> Optional[str]:
    """Open MPI's system-wide parameter file for the nodes: the host's, with TCP between the
    nodes over ``tcp_if`` (their subnet, or lo where they share the host's network), or
    None where Debian's Open MPI is not installed. A job's own settings (OMPI_MCA_*
    variables, mpirun --mca) still win over the file."""
    try:
        text = system.read_text()
    except OSError:
        return None
    kept = [line for line in text.splitlines()
            if line.split("#", 1)[0].split("=", 1)[0].strip() not in OPENMPI_KEYS]
    kept += ["", "# simcluster: Open MPI between the virtual nodes of one host (the local backend) goes over",
             "# TCP on the nodes' network (over loopback its default skips lo and a job across nodes hangs)."]
    kept += [f"btl_tcp_if_include = {tcp_if}", "btl = self,tcp"]
    return "\n".join(kept) + "\n"


def foreign_openmpi() -> Optional[str]:
    """An Open MPI on PATH whose parameter file is not Debian's (a build in /opt, a conda
    environment): its mpirun's path, or None. OPENMPI_PARAMS does not reach it."""
    found = shutil.which("ompi_info")
    if not found:
        return None
    real = os.path.realpath(found)
    return None if real.startswith("/usr/bin/") and os.path.exists(OPENMPI_PARAMS) else real


# Programs that can be a PID namespace's init: tini (Debian's `tini` package; docker.io
# ships the same program as docker-init). Its only jobs are reaping and passing signals on.
PID_INITS = ("tini", "tini-static", "docker-init")


def pid_init() -> Optional[str]:
    """The path of a tini on this host, or None."""
    for name in PID_INITS:
        path = find_binary(name)
        if path:
            return path
    return None


# simcluster-node-start (nodestart/): where `make setup` builds it in a checkout.
NODE_STARTER = REPO_ROOT / "nodestart" / "build" / "simcluster-node-start"
NODE_STARTER_SOURCE = REPO_ROOT / "nodestart" / "simcluster-node-start.c"


def node_starter() -> Optional[str]:
    """simcluster-node-start's path where it is built, else None (`up` then starts nodes
    through the chain of standard programs it replaces: the same nodes, more CPU per start).
    A build older than its source (a checkout updated since `make setup`) is not used: it
    may lack an option this code passes."""
    try:
        built = NODE_STARTER.stat().st_mtime
    except OSError:
        return None
    try:
        if NODE_STARTER_SOURCE.stat().st_mtime > built:
            return None
    except OSError:
        pass  # no source beside it: an installed build
    return str(NODE_STARTER) if os.access(NODE_STARTER, os.X_OK) else None


# Time namespaces (Linux >= 5.6): each node start gets a boot clock of its own.
TIME_NAMESPACE = "/proc/self/ns/time"
# The chain's way to a fresh boot clock: unshare's --boottime offset is minus the seconds this
# host has been up, read when the node starts (the argv is kept in the cluster's placement).
_FRESH_BOOTTIME_SCRIPT = 'read up rest < /proc/uptime; exec "$0" --time --boottime="-${up%.*}" "$@"'


def fresh_boottime_note(uid: int, init: Optional[str]) -> str:
    """"" when each node start can get a boot clock of its own (a time namespace, see
    namespace_prefix), else why not, one line: the nodes then keep this host's boot time, and
    slurmctld does not see a node that `fault kill` and heal restarted as rebooted."""
    why = ("the kernel has no time namespaces (Linux < 5.6)" if not os.path.exists(TIME_NAMESPACE) else
           "rootless" if uid != 0 else "no PID namespace per node (tini)" if not init else "")
    return (f"this host's ({why}): slurmctld does not see a node restarted by `fault heal` as rebooted"
            if why else "")


def namespace_prefix(fstab: str, uid: int, gid: int, init: Optional[str] = None,
                     spool: Optional[str] = None, netns: Optional[str] = None,
                     cgroup_join: Optional[str] = None, cgroup_procs: Sequence[str] = (),
                     starter: Optional[str] = None, cgroup_ns: Optional[str] = None,
                     fresh_boottime: bool = False, outer_cgroup_procs: Optional[str] = None,
                     enter: Sequence[str] = (), cgroup_scope: Sequence[str] = ()) -> List[str]:
    """The argv prefix that starts a daemon in mount and UTS namespaces of its own with the
    bind mounts of ``fstab`` (node_fstab: the cluster's hosts file as /etc/hosts, its config
    directory as /etc/slurm, ...), and the host name the node's (the value after ``-N`` in the
    daemon's argv), as on a host of its own: `hostname` in a job prints node1, and tools
    that find "am I that host?" by comparing names (torchrun's c10d rendezvous decides so
    which node serves the store) answer as on a real cluster.

    With ``init`` (a tini), the daemon also gets a PID namespace of its own, with its own
    /proc, and ``init`` as its pid 1: the node's processes (slurmd, its slurmstepd, the
    jobs) see only each other, as on a host of their own. That is also what makes many
    small jobs cheap: proctrack/linuxproc reads /proc/<pid>/stat of every process it can
    see several times per job step, and it now sees the node's few processes instead of
    the whole host's (docs/benchmarks-throughput.md). The init is needed because slurmd
    never reaps the slurmstepd it double-forks: as pid 1 itself it would collect zombies.
    The node's processes end with the namespace: when its slurmd exits, tini exits with
    it and the kernel kills every process left in the namespace, as a node that goes down
    takes its jobs with it. The daemon's pid is then tini's child's, not the one `unshare`
    gets (:func:`daemon_pid`, which is cluster/model/command_runner.py's descendant_pid, finds it). With
    ``spool`` too, the node's spool directory
    (``spool``/<node>) is a tmpfs of the namespace (see _NAMESPACE_PID_SCRIPT). Without
    ``init`` the daemon keeps the pid it was started with (unshare and sh exec, they do
    not fork), and its spool directory stays on disk, where a restarted slurmd finds the
    job steps that outlived the old one.

    As root one `unshare` does it. Rootless, only a user namespace grants the right to
    mount: the outer one maps the user to root to mount, the inner one maps the user back
    to itself, so slurmd and its jobs run as the user, as they would without it.

    As root, two more things can come first (the local provider passes them where
    network.py and cgroups.py can be used): ``netns``, the path of the node's network
    namespace, which `nsenter` joins (NODE_TOKEN in it stands for the node's name, put in
    by daemons.slurmd_argv), and ``cgroup_join`` (cgroups.join_script), a shell that moves
    itself into the node's cgroups; `unshare` then also makes a cgroup namespace rooted
    there, and the node's fstab mounts the hierarchies again (cgroups.fstab_lines). With
    ``cgroup_ns`` (cgroup v2: the file that keeps the node's cgroup namespace, made with
    its cgroup) the process enters that namespace after joining, instead of making one; then
    (Slurm 24.11's cgroup/v2 wants both) the node's mount namespace drops the host's
    /sys/fs/cgroup before mounting its own, and only the node's own processes stay in its
    init leaf: the process outside the node's PID namespace (`unshare`, the starter's outer
    half) is in ``outer_cgroup_procs``'s cgroup instead. The chain joins that one
    (cgroup_join) and the namespace script moves pid 1 and itself into the leaf once the
    node's cgroup2 is mounted (_V2_BEFORE_MOUNT, _V2_AFTER_MOUNT).

    Every program is named by its absolute path (find_binary), since the caller's PATH may
    not reach it: `unshare` execs the next word of the argv by PATH lookup.

    As root with ``init``, ``starter`` (node_starter: simcluster-node-start) makes all of
    that in one process, the same system calls in the same order (``cgroup_procs``: the
    files join_script writes to): seven programs loaded per node start become one, and
    mount(8)'s parsing of the machine's mount table (every node's network namespace is a
    mount in it) goes; at 1024 nodes that chain cost more CPU than slurmd's own start. The
    starter is then also the node's pid 1 itself (its --init: tini's reaping and passing on
    of signals, one program fewer loaded per node); ``init`` only says that a PID namespace
    is wanted.

    With ``fresh_boottime`` (as root with ``init``, where fresh_boottime_note says ""), each
    start of the node also makes a time namespace whose CLOCK_BOOTTIME starts at 0: a node
    that starts again after `fault kill` has booted then, as a crashed host that rebooted
    has. sysinfo()'s uptime, which slurmd reports at registration and from which slurmctld
    sets the node's BootTime, counts from that start (slurmctld: "Node X rebooted N secs
    ago"; with ReturnToService 0 or 1, "Node unexpectedly rebooted"), and so do `uptime`
    and /proc/uptime in jobs. CLOCK_MONOTONIC and the wall clock stay the host's.

    Rootless with a network of the cluster's own (``enter``: userns.enter_argv, the argv
    that joins the cluster's user and mount namespaces, where the user is root and the
    nodes' network namespaces are kept): the rest is root's chain (or the starter), run as
    that namespace's root, with the user mapped back to itself last (an inner user
    namespace, as without ``enter``), so slurmd and its jobs run as the user. With
    ``cgroup_scope`` too (cgroups_delegated.scope_argv: a cgroup v2 host whose systemd delegates a
    subtree to the user), the node starts in a delegated systemd scope of its own first, and
    the chain makes in it the node's cgroup tree and namespace (cgroups_delegated.scope_join_script),
    then goes on as root's cgroup v2 chain does; the starter is not used then.
    """
    if enter:
        join = None
        if cgroup_scope:
            from provisioner.providers.local import cgroups_delegated  # the one place that knows the tree
            join, starter = cgroups_delegated.scope_join_script(), None
        inner = _namespace_prefix(fstab, 0, 0, init, spool, netns, join, (), starter, None, fresh_boottime, None,
                                  user_namespace=True, own_cgroup_ns=bool(cgroup_scope))
        return [*cgroup_scope, *enter, *inner, find_binary("unshare") or "unshare", "--user", f"--map-user={uid}",
                f"--map-group={gid}", *(cgroups_delegated.preload_argv() if cgroup_scope else [])]
    return _namespace_prefix(fstab, uid, gid, init, spool, netns, cgroup_join, cgroup_procs, starter, cgroup_ns,
                             fresh_boottime, outer_cgroup_procs, user_namespace=uid != 0)


def _namespace_prefix(fstab: str, uid: int, gid: int, init: Optional[str], spool: Optional[str],
                      netns: Optional[str], cgroup_join: Optional[str], cgroup_procs: Sequence[str],
                      starter: Optional[str], cgroup_ns: Optional[str], fresh_boottime: bool,
                      outer_cgroup_procs: Optional[str], user_namespace: bool,
                      own_cgroup_ns: bool = False) -> List[str]:
    """``own_cgroup_ns``: ``cgroup_join`` makes the node's cgroup v2 namespace itself (a
    delegated scope, cgroups_delegated.scope_join_script) instead of joining one kept in a file."""
    if uid == 0 and init and starter:
        opts = ["--net", netns] if netns else []
        for procs in cgroup_procs:
            opts += ["--cgroup-procs", procs]
        if cgroup_ns:
            opts += ["--cgroupns", cgroup_ns]
        if outer_cgroup_procs:
            opts += ["--outer-cgroup-procs", outer_cgroup_procs]
        opts += ["--fstab", fstab, "--hostname", NODE_TOKEN]
        if spool:
            opts += ["--tmpfs", f"{spool}/{NODE_TOKEN}"]
        if fresh_boottime:
            opts.append("--fresh-boottime")
        # --init: the starter is the node's pid 1 itself (tini's work, one exec fewer).
        return [starter, *opts, "--init", "--"]
    pid_ns = ["--pid", "--fork", "--kill-child", "--mount-proc"] if init else []
    unshare, sh = find_binary("unshare") or "unshare", find_binary("sh") or "/bin/sh"
    template = _NAMESPACE_PID_SCRIPT if init else _NAMESPACE_SCRIPT
    if uid == 0 and (cgroup_ns or own_cgroup_ns):
        template = _V2_BEFORE_MOUNT + template.replace(_AFTER_MOUNT, _AFTER_MOUNT + (
            _V2_AFTER_MOUNT.format(pids="1 $$") if init else _V2_AFTER_MOUNT.format(pids="$$")), 1)
    argv = [init, "--", sh, "-c", script(template, user_namespace), fstab, spool or ""] if init \
        else [sh, "-c", script(template, user_namespace), fstab]
    if uid == 0:
        first = [find_binary("nsenter") or "nsenter", f"--net={netns}"] if netns else []
        if cgroup_join:
            first += [sh, "-c", cgroup_join, NODE_TOKEN]
        if cgroup_ns:
            first += [find_binary("nsenter") or "nsenter", f"--cgroup={cgroup_ns}"]
        if fresh_boottime and init:
            first += [sh, "-c", _FRESH_BOOTTIME_SCRIPT]  # execs unshare with --time first
        return [*first, unshare, *(["--cgroup"] if cgroup_join and not (cgroup_ns or own_cgroup_ns) else []),
                "--mount", "--uts", *pid_ns,
                "--propagation", "private", *argv]
    return [unshare, "--user", "--map-root-user", "--mount", "--uts", *pid_ns, "--propagation", "private",
            *argv, unshare, "--user", f"--map-user={uid}", f"--map-group={gid}"]


def namespaces_work(hosts: Path, init: Optional[str] = None) -> bool:
    """True if a daemon can be started behind :func:`namespace_prefix` here (a container
    without CAP_SYS_ADMIN or with user namespaces blocked cannot; one may allow mount
    namespaces but refuse a PID namespace or mounting /proc). The probe mounts ``hosts``
    over /etc/hosts in a namespace of its own (the host's stays as it is)."""
    with tempfile.NamedTemporaryFile("w", prefix="simcluster-probe-", suffix=".fstab") as fstab:
        fstab.write(node_fstab([(str(hosts), HOSTS)]))
        fstab.flush()
        argv = namespace_prefix(fstab.name, os.getuid(), os.getgid(), init) + [find_binary("true") or "true", "-N",
                                                                                "simcluster-probe"]
        try:
            return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
