"""cgroup v2 delegated to an ordinary user: each start of a node in a systemd user scope of
its own (`systemd-run --user --scope -p Delegate=yes`) that holds the node's cgroup tree and
namespace, whether this host's systemd delegates what Slurm needs (delegation), and the
preload that lets Slurm's root-owned chowns pass in the cluster's user namespace. The why is
in the comment below.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

from provisioner.cluster.model.placement import NODE_TOKEN
from provisioner.paths import REPO_ROOT
from provisioner.providers.local.cgroupfs import ROOT, controllers_of, find_program, is_v2, slurm_release
from provisioner.providers.local.cgroups_v2 import V2_INIT, V2_OUTER, V2_WANTED

# -- cgroup v2 delegated to an ordinary user ---------------------------------------------------
#
# Without root no cgroup of /sys/fs/cgroup/simcluster can be made, but a cgroup v2 host whose
# systemd runs a user manager for the user (a login, or `loginctl enable-linger USER`) gives
# them a subtree of their own: user@UID.service is Delegate=yes (Debian 12: the pids, memory
# and cpu controllers; an admin's drop-in can add cpuset), and `systemd-run --user --scope -p
# Delegate=yes` makes a scope there that belongs to the user, with the calling process in it
# (systemd, which may move the process there; the user may not, from a cgroup outside that
# subtree). Each start of a node runs in a scope of its own (scope_argv): that scope is the
# node's N of cgroups_v2.py, whatever its name, and the node's chain makes in it what
# create_v2 makes as root: the starter and init leaves, system.slice with the controllers
# given down, and a cgroup namespace rooted at N, made by the first process while it is still
# in N (SCOPE_JOIN_SCRIPT); the node's mount namespace then mounts N as its /sys/fs/cgroup and
# moves its pid 1 into N/init, as root's do. Slurm's cgroup/v2 plugin in the node's slurmd,
# in the cluster's user namespace and as the user who owns N, makes its slurmstepd scope, job
# and step cgroups there and writes memory.max (--mem), cpuset.cpus (cores, where cpuset is
# delegated) and cgroup.kill/freeze (whole-step kill). The scope is made anew at every start
# (a cgroup namespace cannot be kept for it: systemd removes an empty scope), and it goes with
# the node's last process, so `down` has no cgroup to remove.
#
# Devices: Slurm confines them with eBPF programs attached to job cgroups, which the kernel
# lets only a process with CAP_BPF/CAP_SYS_ADMIN in the initial user namespace load: an
# ordinary user's nodes keep ConstrainDevices off, and jobs see every GPU (the TaskProlog maps
# Slurm's indices to the node's own, as without cgroups).

# What Slurm's cgroup/v2 needs delegated for the limits it enforces here: memory (--mem,
# task/cgroup's ConstrainRAMSpace); cpuset for ConstrainCores, where delegated.
DELEGATED_NEEDED = ("memory",)
# The unit name of a node's scope: the cluster's tag, the node, the starting shell's pid (a
# node started again while systemd still removes its last scope gets a new one).
SCOPE_UNIT_PREFIX = "simcluster-"
# Run in the node's fresh scope N, as root of the cluster's user namespace ("$0" the node's
# name): the leaves and system.slice in N, then a cgroup namespace rooted at N (unshare,
# while this process is N's only one), in which the shell moves itself into N/starter and
# gives N's and system.slice's children the controllers N has; then the rest of the chain.
# INVOCATION_ID (systemd-run sets it) would tell slurmd that systemd started it, and slurmd
# would then stay in /init instead of moving into its slurmstepd scope, as root's do.
SCOPE_JOIN_SCRIPT = (
    'read l < /proc/self/cgroup; n=/sys/fs/cgroup${{l#0::}}; '
    'mkdir -p "$n/{outer}" "$n/{init}" "$n/system.slice" || exit 1; unset INVOCATION_ID; '
    "exec {unshare} --cgroup {sh} -c '"
    'echo $$ > "$0/{outer}/cgroup.procs" || exit 1; c=; '
    'for x in $(cat "$0/cgroup.controllers"); do case " {wanted} " in *" $x "*) c="$c +$x";; esac; done; '
    'for d in "$0" "$0/system.slice"; do [ -z "$c" ] || echo $c > "$d/cgroup.subtree_control" || exit 1; done; '
    "exec \"$@\"' \"$n\" \"$@\"")


# Preloaded into the node's slurmd (nodestart/simcluster-cgroup-chown.c, built by `make setup`):
# Slurm chowns each cgroup it makes to root, who has no id in the node's user namespace.
CHOWN_SHIM = REPO_ROOT / "nodestart" / "build" / "libsimcluster-cgroup-chown.so"


class Delegation:
    """What an ordinary user's systemd delegates to them here: ``reason`` "" when the nodes
    can have cgroups in it, else why not (one line, for status); ``controllers`` those a scope
    of theirs has; ``runtime_dir`` where their user manager listens."""

    def __init__(self, reason: str, controllers: Sequence[str] = (), runtime_dir: str = "") -> None:
        self.reason, self.controllers, self.runtime_dir = reason, list(controllers), runtime_dir

    @property
    def cores(self) -> bool:
        return "cpuset" in self.controllers


ROOTLESS_V1 = ("rootless on cgroup v1: no cgroup can be made without root, so --mem, devices and cores are "
               "not enforced")


def user_runtime_dir(uid: int) -> str:
    """Where the user's systemd manager listens ($XDG_RUNTIME_DIR, else /run/user/UID: a
    shell without a login session, `su` or a cron job, has no XDG_RUNTIME_DIR)."""
    return os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"


def _scope_probe_argv(systemd_run: str, sh: str) -> List[str]:
    return [systemd_run, "--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
            f"--unit={SCOPE_UNIT_PREFIX}probe-{os.getpid()}", "--", sh, "-c",
            'read l < /proc/self/cgroup; cat "/sys/fs/cgroup${l#0::}/cgroup.controllers"']


# Slurm releases whose cgroup/v2 plugin runs in a delegated scope as shown in the bookworm VM
# (tests/vm): 24.11's takes the first cgroup2 mount of the node's /proc/1/mountinfo, and an
# ordinary user's node cannot unmount the host's (a mount locked by the user namespace).
DELEGATED_SLURM_BELOW = (23, 0)


LINGER_DIR = "/var/lib/systemd/linger"  # logind's: a file per user whose manager runs without a login


def delegation(slurm_version: Optional[str] = None, root: Path = ROOT, linger_dir: str = LINGER_DIR) -> Delegation:
    """Whether this ordinary user's nodes can have cgroups here: a cgroup v2 host, a Slurm
    release whose cgroup/v2 runs there, systemd's user manager answering (systemd-run --user
    makes a delegated scope, the probe's process reads the controllers it has there), and
    the memory controller among them. The manager must linger (run without a login): it
    stops at the user's last logout, and the nodes in its scopes with it."""
    if not is_v2(root):
        return Delegation(ROOTLESS_V1)
    release = slurm_release(slurm_version)
    if release and release >= DELEGATED_SLURM_BELOW:
        return Delegation(f"rootless on cgroup v2: the nodes' cgroups in a user's delegated subtree are made for "
                          f"Slurm 22.05's cgroup plugin, not yet for this host's {slurm_version}: limits are not "
                          "enforced")
    lacking = [c for c in DELEGATED_NEEDED if c not in controllers_of(root)]
    if lacking:
        return Delegation(f"rootless: cgroup v2 without the {', '.join(lacking)} controller(s): limits are not enforced")
    systemd_run, sh = find_program("systemd-run"), find_program("sh") or "/bin/sh"
    if not CHOWN_SHIM.exists():
        return Delegation(f"rootless on cgroup v2: {CHOWN_SHIM.name} is not built (make setup builds it: "
                          "Slurm's cgroup plugin needs it in a user namespace): limits are not enforced")
    if not systemd_run:
        return Delegation("rootless on cgroup v2 without systemd (no systemd-run): no cgroup is delegated to this "
                          "user, so --mem, devices and cores are not enforced")
    user = _user_name()
    if not os.path.exists(os.path.join(linger_dir, user)):
        # Without lingering the manager stops at the user's last logout, and with it every
        # scope it holds: the nodes would die then.
        return Delegation(f"rootless on cgroup v2: this user's systemd manager, which would hold the nodes' cgroups, "
                          f"stops (with the nodes) at the last logout unless it lingers: `loginctl enable-linger "
                          f"{user}`, then up again. Until then --mem, devices and cores are not enforced")
    runtime = user_runtime_dir(os.getuid())
    env = dict(os.environ, XDG_RUNTIME_DIR=runtime)
    try:
        res = subprocess.run(_scope_probe_argv(systemd_run, sh), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=30, env=env, stdin=subprocess.DEVNULL)
        ok, out = res.returncode == 0, (res.stdout.strip() if res.returncode == 0 else res.stderr.strip())
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, out = False, str(exc)
    if not ok:
        return Delegation(f"rootless on cgroup v2: this user's systemd manager gave no delegated cgroup "
                          f"(systemd-run --user: {out.splitlines()[-1][:160] if out else 'failed'}): --mem, devices "
                          "and cores are not enforced")
    have = out.split()
    lacking = [c for c in DELEGATED_NEEDED if c not in have]
    if lacking:
        return Delegation(f"rootless on cgroup v2: this user's systemd delegates no {', '.join(lacking)} controller "
                          f"(it delegates: {' '.join(have) or 'none'}; an admin adds them with a drop-in for "
                          "user@.service: Delegate=cpu cpuset io memory pids): limits are not enforced")
    return Delegation("", have, runtime)


def _user_name() -> str:
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def scope_argv(tag: str, runtime_dir: str) -> List[str]:
    """The argv prefix that starts a node (NODE_TOKEN: its name) in a delegated scope of its
    own, in this host's namespaces (systemd must see the user's own process): systemd-run
    execs the rest, keeping the pid."""
    sh = find_program("sh") or "/bin/sh"
    return [sh, "-c", f'r=$1; shift; XDG_RUNTIME_DIR={shlex.quote(runtime_dir)} exec "$r" --user --scope --quiet '
                      f'--collect -p Delegate=yes --unit="{SCOPE_UNIT_PREFIX}{tag}-$0-$$" -- "$@"',
            NODE_TOKEN, find_program("systemd-run") or "systemd-run"]


def preload_argv() -> List[str]:
    """What comes right before slurmd in the node's chain: CHOWN_SHIM preloaded."""
    return [find_program("env") or "env", f"LD_PRELOAD={CHOWN_SHIM}"]


def scope_join_script() -> str:
    """SCOPE_JOIN_SCRIPT with its programs by absolute path ("$0": the node's name, unused)."""
    return SCOPE_JOIN_SCRIPT.format(outer=V2_OUTER, init=V2_INIT, wanted=" ".join(V2_WANTED),
                                    unshare=shlex.quote(find_program("unshare") or "unshare"),
                                    sh=shlex.quote(find_program("sh") or "/bin/sh"))


def stop_scopes(tag: str, runtime_dir: str) -> None:
    """Stop the cluster's node scopes that are left (a process that outlived its node's
    kill): systemd kills what is in them and removes their cgroups."""
    systemctl = find_program("systemctl")
    if not systemctl:
        return
    subprocess.run([systemctl, "--user", "stop", f"{SCOPE_UNIT_PREFIX}{tag}-*.scope"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30,
                   env=dict(os.environ, XDG_RUNTIME_DIR=runtime_dir), stdin=subprocess.DEVNULL)
