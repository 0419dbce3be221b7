"""The cluster's daemons: their command lines, and starting one and watching it become usable.

The command lines exist only here: `up`'s steps start them through runners, and the
benchmark's raw baseline (scripts/bench.py) prints the same ones into a shell loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from provisioner.cluster.model.handle import Cluster, log_name
from provisioner.cluster.model.placement import CONTROLLER, NODE_TOKEN
from provisioner.cluster.model.wait import WaitStrategy, daemons_guard

# Added to each slurmd's environment. Measured with Slurm 22.05 on Debian 12
# (docs/benchmarks.md has the numbers):
# - To read the CPU topology, all slurmd asks of hwloc, hwloc dlopens every plugin it has
#   (OpenCL, GL, PCI, libxml2); OpenCL pulls in libstdc++, which is never unloaded.
#   Without them a slurmd starts on 7-13 ms less CPU and keeps ~1 MB less RSS.
# - One malloc arena and a heap top trimmed on free: ~80 KB less private memory per slurmd.
# Only slurmd (and the slurmstepd it starts) gets these: there is one per node, while
# slurmctld and the database are single and busier. Job tasks get the environment of
# srun/sbatch, not slurmd's, so training jobs never see them.
SLURMD_ENV = {
    "HWLOC_PLUGINS_BLACKLIST": "hwloc_gl,hwloc_opencl,hwloc_pci,hwloc_xml_libxml",
    "GLIBC_TUNABLES": "glibc.malloc.arena_max=1:glibc.malloc.trim_threshold=0:glibc.malloc.top_pad=0",
}


def slurmd_env(cluster: Cluster, node: str) -> Dict[str, str]:
    """SLURMD_ENV, plus the node's cached hardware topology for hwloc.

    Every slurmstepd (one per job step) rediscovers the machine's topology with hwloc to
    write it to a file for its step (Slurm 22.05 does so unconditionally): ~120 sysfs files
    read per step, the largest share of a trivial step's cost after the process scans.
    slurmd already wrote that same topology to hwloc_topo_whole.xml in its spool directory
    when it started; HWLOC_XMLFILE makes the step daemons load it from there instead.
    HWLOC_THISSYSTEM=1 says the file describes this very machine, so binding (--cpu-bind)
    acts on it as before. Before slurmd first writes the file, hwloc finds no file and
    discovers the machine itself, which is how slurmd makes it.
    """
    return {**SLURMD_ENV, "HWLOC_XMLFILE": f"{cluster.paths.spool}/{node}/hwloc_topo_whole.xml",
            "HWLOC_THISSYSTEM": "1"}


def program(cluster: Cluster, key: str, name: str) -> str:
    """Program ``name`` as daemon ``key``'s machine names it: an absolute path on this host
    (Debian installs the daemons in /usr/sbin, which an ordinary user's PATH lacks, and a
    name behind a prefix such as `unshare` would be looked up on the caller's PATH)."""
    return cluster.daemon_runner(key).program(name)


def munged_argv(cluster: Cluster, key: str = "munged") -> List[str]:
    p = cluster.paths
    # --force: the state dir is 0700 (and ~ may be too); munged would refuse a socket
    # that other users cannot reach, but only this user needs it.
    return [program(cluster, key, "munged"), "--foreground", "--force", f"--key-file={p.munge_key}",
            f"--socket={p.munge_socket}",
            f"--pid-file={p.run}/munged.pid", f"--seed-file={p.munge_dir}/seed"]


def slurmctld_argv(cluster: Cluster) -> List[str]:
    return [*cluster.placement.controller_prefix, program(cluster, "slurmctld", "slurmctld"), "-D", "-f",
            cluster.paths.slurm_conf]


def slurmd_argv(cluster: Cluster, node: str) -> List[str]:
    prefix = [a.replace(NODE_TOKEN, node) for a in cluster.placement.slurmd_prefix]
    return [*prefix, program(cluster, f"slurmd:{node}", "slurmd"), "-D", "-N", node, "-f", cluster.paths.slurm_conf]


def slurmdbd_argv(cluster: Cluster) -> List[str]:
    # slurmdbd has no -f: it finds slurmdbd.conf next to $SLURM_CONF. Started through a
    # link in the run directory so that its command line names the cluster like the others'.
    return [*cluster.placement.controller_prefix, f"{cluster.paths.run}/slurmdbd", "-D"]


@dataclass(frozen=True)
class Launch:
    """One daemon as its machine starts it: its command line, whole environment and log
    file. The steps start it through the runner; a machine that starts its daemons itself
    (cluster/model/provider.py: BootsDaemons) gets the very same."""

    key: str  # the daemon's key in the state ("munged", "slurmctld", "slurmd:node1")
    argv: List[str]
    env: Dict[str, str]
    log: str


def launch(cluster: Cluster, key: str, argv: List[str], env: Optional[Dict[str, str]] = None,
           output: str = ".out") -> Launch:
    """Daemon ``key`` with ``argv``: the cluster's daemon environment plus ``env``, output
    to log/<name><output>."""
    full_env = cluster.daemon_env()
    full_env.update(env or {})
    return Launch(key, argv, full_env, f"{cluster.paths.log}/{log_name(key)}{output}")


def munged_launch(cluster: Cluster, runner_key: str) -> Launch:
    """munged on machine ``runner_key``: in the foreground it logs to stderr only, so that
    is its log file."""
    key = munged_key(runner_key)
    return launch(cluster, key, munged_argv(cluster, key), output=".log")


def slurmctld_launch(cluster: Cluster) -> Launch:
    return launch(cluster, "slurmctld", slurmctld_argv(cluster))


def slurmd_launch(cluster: Cluster, node: str) -> Launch:
    return launch(cluster, f"slurmd:{node}", slurmd_argv(cluster, node), env=slurmd_env(cluster, node))


def start_launch(cluster: Cluster, what: Launch, own_pid: Optional[Callable[[int], int]] = None) -> int:
    """Start ``what`` on its runner and record its pid in the state. ``own_pid`` maps the
    started pid to the daemon's own where the argv forks first."""
    pid = cluster.daemon_runner(what.key).start_daemon(what.argv, what.log, what.env)
    if own_pid:
        pid = own_pid(pid)
    cluster.state.pids[what.key] = pid
    return pid


def start(cluster: Cluster, key: str, argv: List[str], env: Optional[Dict[str, str]] = None,
          output: str = ".out", own_pid: Optional[Callable[[int], int]] = None) -> int:
    """Start daemon ``key`` on its runner, record its pid in the state; output to log/<name><output>.
    ``own_pid`` maps the started pid to the daemon's own where the argv forks first."""
    return start_launch(cluster, launch(cluster, key, argv, env, output), own_pid)


def wait_usable(cluster: Cluster, key: str, what: str, ready, timeout: float) -> None:
    """Wait until ``ready()`` holds for daemon ``key`` (its socket exists, its port listens).
    A daemon that is usable at the first look costs one check, not a liveness check and
    then the check: where each is a round trip (docker exec: ~50 ms) the liveness check is
    only asked while it is not usable yet (then before every check, as always)."""
    if ready():
        return
    WaitStrategy(f"{key} to {what}", lambda: (ready(), None), timeout, first_delay=0.005, max_delay=0.05,
                 guard=daemons_guard(cluster, [key]), describe=lambda _: "", logs=lambda: cluster.log_tail(key),
                 hint="see the log below").wait()


def munged_key(runner_key: str) -> str:
    return "munged" if runner_key == CONTROLLER else f"munged:{runner_key}"
