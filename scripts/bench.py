#!/usr/bin/env python3
"""Benchmark the local backend: `up` to all-idle, `down`, and memory per virtual node.

For each size it times the whole `simcluster up` and `simcluster down` commands (wall
clock, as a user sees them; plus the max RSS of the CLI process itself), and while the
cluster is up it measures RSS and PSS of every daemon and the CPU time each slurmd took
to start. It also times a raw baseline: a bash script generated from `up`'s own step
list (provisioner/cluster/lifecycle/steps.py, command lines from provisioner/cluster/services/daemons.py)
that starts the very same daemons with the very same configs, in the same order, and
waits on the same conditions, without simcluster; once in a plain environment (as the
daemons come) and once with what simcluster adds to each slurmd's environment. `up`
minus the second is simcluster's own overhead.

Usage: python scripts/bench.py [--out docs/benchmarks.md] [--sizes 2,16,64,256,512,1024]
                               [--repeat N] [--quick] [--no-raw]
Every cluster lives under its own SIMCLUSTER_HOME (default /tmp/sc-bench) and is named
bench-<nodes> (bench-raw-<nodes> for the baseline); each is torn down whatever happens.
The output file is rewritten down to END_MARKER; hand-written analysis below it is kept.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.cluster.lifecycle.steps import steps_for  # noqa: E402
from provisioner.cluster.model.command_runner import find_binary  # noqa: E402
from provisioner.cluster.model.handle import Cluster  # noqa: E402
from provisioner.cluster.services import daemons  # noqa: E402
from provisioner.named_clusters import load  # noqa: E402
from provisioner.providers.local import names  # noqa: E402
from provisioner.providers.local.processes import cluster_pids, terminate  # noqa: E402
import figures  # noqa: E402  (scripts/figures.py: the quotes of other pages' figures)

DEFAULT_SIZES = [2, 16, 64, 256, 512, 1024]
DEFAULT_REPEAT = {2: 5, 16: 5, 64: 3, 256: 3, 512: 2, 1024: 2}
# Targets (2 cores): median `up` per size, `down` for every size, RSS per slurmd, PSS of a
# node's processes at 1024 nodes, and `up` against the raw loop at 64 nodes.
UP_TARGET = {2: 1.5, 256: 3.0, 1024: 15.0}
DOWN_TARGET = {2: 2.0, 16: 2.0, 64: 2.0, 256: 2.0}  # the first issue's; none asked above 256
RSS_TARGET_MB = 4.0
PSS_PER_NODE_TARGET_MB = {1024: 2.0}
RAW_RATIO_TARGET = {64: 0.8}
# The raw baselines (two bash runs per `up` run) only up to this size: above it they would
# double the benchmark's time for no figure a target asks for.
RAW_MAX_NODES = 256
END_MARKER = "<!-- end of generated results: text below this line is kept by scripts/bench.py -->"
DATA_PREFIX = "<!-- bench-data "  # the raw numbers, for --merge
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, flush=True)


# -- running commands ------------------------------------------------------------------------
class Cmd:
    """One finished command: wall seconds, exit code, output, max RSS (KB) of the process,
    CPU seconds it and the children it waited for used, and CPU seconds the whole machine
    was busy meanwhile (to tell how much other work competed with it)."""

    def __init__(self, wall: float, rc: int, out: str, err: str, usage, machine_busy: float):
        self.wall, self.rc, self.out, self.err = wall, rc, out, err
        self.maxrss_kb = usage.ru_maxrss
        self.cpu = usage.ru_utime + usage.ru_stime
        self.machine_busy = machine_busy


def machine_busy_s() -> float:
    """CPU seconds all cores have been busy since boot (/proc/stat, idle and iowait excluded)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK


def run_timed(argv: List[str], env: Dict[str, str], timeout: float = 600.0) -> Cmd:
    """Run ``argv`` to completion; wall clock and, from wait4(), its max RSS (as time -v shows)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy0 = machine_busy_s()
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPO)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)  # polling costs < 2 ms of resolution, nothing of the command's time
        wall = time.monotonic() - t0
        busy = machine_busy_s() - busy0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Cmd(wall, proc.returncode, out.read().decode(errors="replace"),
                   err.read().decode(errors="replace"), usage, busy)


class Bench:
    def __init__(self, home: Path):
        self.home = home
        exe = Path(sys.executable).parent / "simcluster"
        self.cli = [str(exe)] if exe.exists() else [sys.executable, "-m", "provisioner"]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SIMCLUSTER_HOME"] = str(home)
        os.environ["SIMCLUSTER_HOME"] = str(home)  # where clusters.load() finds the raw baseline's cluster

    def sc(self, *args: str, check: bool = True) -> Cmd:
        res = run_timed(self.cli + list(args), self.env)
        if check and res.rc != 0:
            raise RuntimeError(f"simcluster {' '.join(args)} failed (exit {res.rc}):\n{res.err}{res.out}")
        return res

    def root(self, name: str) -> Path:
        return self.home / name

    def state(self, name: str) -> Dict:
        return json.loads((self.root(name) / "state.json").read_text())

    def down_quietly(self, name: str) -> None:
        if self.root(name).exists():
            self.sc("down", "--name", name, check=False)


# -- measuring daemons -------------------------------------------------------------------------
def smaps_rollup(pid: int) -> Dict[str, int]:
    """Rss, Pss, ... in KB from /proc/<pid>/smaps_rollup ({} if the process is gone)."""
    vals: Dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    vals[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return vals


def smaps_breakdown(pid: int) -> List[Tuple[str, float, float]]:
    """Where one process's RSS goes: [(what, RSS MB, PSS MB)], from /proc/<pid>/smaps."""
    groups: Dict[str, List[int]] = {}
    what = ""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if "-" in head[0] and not head[0].endswith(":"):  # a mapping's header line
                    path = head[5] if len(head) > 5 else ""
                    if "/slurm-wlm/libslurmfull" in path:
                        what = "libslurmfull.so (Slurm's common code)"
                    elif "/slurm-wlm/" in path:
                        what = "Slurm plugins (*.so)"
                    elif "/libc.so" in path:
                        what = "libc.so.6"
                    elif path.startswith("/usr/sbin/") or path.startswith("/usr/bin/"):
                        what = "slurmd executable"
                    elif path.startswith("/"):
                        what = "other shared libraries"
                    else:
                        what = "heap, stack, anonymous memory"
                elif head[0] in ("Rss:", "Pss:"):
                    acc = groups.setdefault(what, [0, 0])
                    acc[0 if head[0] == "Rss:" else 1] += int(head[1])
    except OSError:
        return []
    rows = [(w, rss / 1024, pss / 1024) for w, (rss, pss) in groups.items()]
    return sorted(rows, key=lambda r: -r[1])


def measure_memory(pids: Dict[str, int]) -> Dict[str, float]:
    """Per-slurmd RSS/PSS (MB) and the totals of the other daemons, for pids keyed as in state.json."""
    slurmd = [m for m in (smaps_rollup(p) for k, p in pids.items() if k.startswith("slurmd:")) if m]
    others = [m for m in (smaps_rollup(p) for k, p in pids.items() if not k.startswith("slurmd:")) if m]
    mb = lambda kb: kb / 1024.0  # noqa: E731
    mean = lambda key: mb(statistics.mean(m.get(key, 0) for m in slurmd))  # noqa: E731
    return {
        "node_pss_mean": node_processes_pss(pids),
        "rss_mean": mean("Rss"),
        "rss_max": mb(max(m["Rss"] for m in slurmd)),
        "pss_mean": mean("Pss"),
        "shared_mean": mean("Shared_Clean") + mean("Shared_Dirty"),
        "private_mean": mean("Private_Clean") + mean("Private_Dirty"),
        "ctl_rss": mb(sum(m.get("Rss", 0) for m in others)),
        "ctl_pss": mb(sum(m.get("Pss", 0) for m in others)),
        "pss_per_node_all": mb(sum(m.get("Pss", 0) for m in slurmd + others) / max(1, len(slurmd))),
    }


# What may stand between a slurmd and pid 1 (names as /proc/<pid>/stat has them: 15 characters).
NODE_HOLDERS = {"tini", "tini-static", "docker-init", "unshare", "simcluster-node"}


def node_processes_pss(pids: Dict[str, int]) -> float:
    """PSS (MB) of everything a node runs at rest, per node: its slurmd and the processes
    that hold its namespaces (simcluster-node-start outside and as pid 1, or unshare and tini), found as the
    ancestors of each slurmd up to pid 1's children."""
    def parent_and_name(pid: int) -> Tuple[int, str]:
        try:
            head, tail = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
            return int(tail.split()[1]), head.split("(", 1)[1]
        except (OSError, ValueError, IndexError):
            return 1, ""
    slurmds = [p for k, p in pids.items() if k.startswith("slurmd:")]
    chain = set()
    for pid in slurmds:
        chain.add(pid)
        pid, _ = parent_and_name(pid)
        while pid > 1 and pid not in chain and parent_and_name(pid)[1] in NODE_HOLDERS:
            chain.add(pid)
            pid = parent_and_name(pid)[0]
    total = sum(m.get("Pss", 0) for m in (smaps_rollup(p) for p in chain) if m)
    return total / 1024.0 / max(1, len(slurmds))


def on_cpu_s(pid: int) -> float:
    """Seconds ``pid``'s live threads have run, from /proc/<pid>/task/*/schedstat (ns).

    Not /proc/<pid>/stat: its utime and stime are each rounded down to 10 ms ticks, which
    reads about half of a slurmd's ~20 ms start-up. Threads that already ended are missed.
    """
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def daemon_cpu(pids: Dict[str, int]) -> Dict[str, float]:
    """CPU time the daemons have used so far. Right after all-idle that is their start-up
    cost, which unlike wall time hardly depends on what else runs.
    Returns the total (s) and the mean per slurmd (ms)."""
    total, slurmd = 0.0, []
    for key, pid in pids.items():
        cpu = on_cpu_s(pid)
        total += cpu
        if key.startswith("slurmd:"):
            slurmd.append(cpu * 1000.0)
    return {"total": total, "slurmd_ms": statistics.mean(slurmd) if slurmd else 0.0}


def others_share(run: Cmd, daemons_total: float) -> float:
    """Fraction of the machine's cores that processes other than ours kept busy during ``run``."""
    others = run.machine_busy - run.cpu - daemons_total
    return max(0.0, others) / (run.wall * (os.cpu_count() or 1))


# -- raw baseline ------------------------------------------------------------------------------
# The raw baseline is generated from `up`'s own step list (provisioner/cluster/lifecycle/steps.py) and
# the daemons' command lines (provisioner/cluster/services/daemons.py), so it cannot drift from `up`:
# each step that applies to the cluster maps to shell lines below, in step order, and a
# step with no entry here stops the benchmark instead of being silently left out.
q = shlex.quote


def wait_loop(cond: str, first: float, cap: float) -> List[str]:
    """Shell lines that poll ``cond`` until it holds, on the schedule of
    provisioner.cluster.model.wait.poll_until: ``first``, growing 1.5x up to ``cap``, then ``cap``."""
    ramp, d = [], first
    while d < cap:
        ramp.append(f"{d:.4f}")
        d *= 1.5
    return [f"ok=; for d in {' '.join(ramp)}; do {cond} && {{ ok=1; break; }}; sleep $d; done",
            f"[ -n \"$ok\" ] || until {cond}; do sleep {cap:.3f}; done"]


def launch(c: Cluster, key: str, argv: List[str], env: Dict[str, str], output: str = ".out") -> str:
    """daemons.start as a shell line: same binary, environment additions and log file."""
    argv = [find_binary(argv[0]) or argv[0]] + [str(a) for a in argv[1:]]
    prefix = "".join(f"{k}={q(v)} " for k, v in env.items())
    return f"{prefix}{shlex.join(argv)} >>{q(f'{c.paths.log}/{daemons.log_name(key)}{output}')} 2>&1 &"


def raw_munged(c: Cluster, slurmd_env: Dict[str, str]) -> List[str]:
    # steps.start_munged: one munged (the local backend's munged_on is [controller]), then its socket.
    lines = [launch(c, daemons.munged_key(k), daemons.munged_argv(c, daemons.munged_key(k)), {}, output=".log")
             for k in c.placement.munged_on]
    return lines + wait_loop(f"[ -e {q(c.paths.munge_socket)} ]", 0.005, 0.05)


def raw_slurmctld(c: Cluster, slurmd_env: Dict[str, str]) -> List[str]:
    # steps.start_slurmctld: then Runner.listening, a LISTEN (0A) row for the port in /proc/net/tcp{,6}
    # (read in the controller's network namespace where it has one: the tables are per namespace).
    port = f"{c.state.controller_port:04X}"
    enter = shlex.join(c.placement.controller_prefix) + " " if c.placement.controller_prefix else ""
    listening = (f"{enter}awk '$2 ~ /:{port}$/ && $4 == \"0A\" {{f=1}} END {{exit !f}}' "
                 "/proc/net/tcp /proc/net/tcp6")
    return [launch(c, "slurmctld", daemons.slurmctld_argv(c), {})] + wait_loop(listening, 0.005, 0.05)


def raw_slurmds(c: Cluster, slurmd_env: Dict[str, str]) -> List[str]:
    # steps.start_slurmds: every slurmd at once (`tuned` adds daemons.SLURMD_ENV, as `up` does).
    return [launch(c, f"slurmd:{n}", daemons.slurmd_argv(c, n), slurmd_env) for n in c.node_names]


def raw_ready(c: Cluster, slurmd_env: Dict[str, str]) -> List[str]:
    # wait.nodes_ready: sinfo until every node is idle, 10 ms backing off to 50 ms
    # (<= 16 nodes) or 250 ms. A fixed fast poll would cost the 256-node baseline most of
    # a core (one sinfo takes ~40 ms of CPU there).
    n = len(c.node_names)
    all_idle = f"[ \"$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)\" -ge {n} ]"
    return wait_loop(all_idle, 0.01, 0.05 if n <= 16 else 0.25)


def raw_made_by_up(c: Cluster, slurmd_env: Dict[str, str]) -> List[str]:
    return []  # done once by the real `up` that made the cluster directory; the raw runs reuse it


RAW_STEPS = {"configs": raw_made_by_up, "fake-gpus": raw_made_by_up, "munged": raw_munged,
             "slurmctld": raw_slurmctld, "slurmd": raw_slurmds, "ready": raw_ready}


def raw_script(c: Cluster, slurmd_env: Dict[str, str]) -> str:
    """A bash script that does what `up`'s steps do for cluster ``c`` after its configs are
    written, step by step in the same order, with no simcluster process: starts the same
    daemon command lines in the same environment and waits on the same conditions."""
    env = " ".join(f"{k}={q(v)}" for k, v in c.daemon_env().items())
    lines = ["set -e", f"export {env}"]
    for step in steps_for(c):
        if step.name not in RAW_STEPS:
            raise RuntimeError(f"`up` step {step.name!r} has no raw equivalent in scripts/bench.py (RAW_STEPS)")
        lines += [f"# step {step.name}: {step.describe(c)}"] + RAW_STEPS[step.name](c, slurmd_env)
    return "\n".join(lines) + "\n"


def reset_cluster_dir(c: Cluster) -> None:
    """Kill this cluster's processes and wipe its runtime state, keeping configs and munge key."""
    layout = c.state.layout
    terminate(cluster_pids(layout.root, c.state.pids.values()), grace=0)
    dirs = [layout.state_save, layout.log, layout.run] + list(layout.spool.iterdir())
    for d in dirs:
        for p in d.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for path in (Path(c.paths.munge_socket), Path(c.paths.munge_socket + ".lock"), Path(c.paths.munge_dir) / "seed"):
        path.unlink(missing_ok=True)


def raw_pids(root: Path, keys) -> Dict[str, int]:
    """Pids of raw-started daemons, as this host numbers them: from the pid files they wrote,
    except a slurmd in a PID namespace of its own (its pid file holds the namespace's
    number), found by its command line (`slurmd ... -N <node> -f <root>/etc/slurm.conf`)."""
    pids = {}
    slurmds: Dict[str, int] = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"slurmd" and str(root).encode() in b" ".join(argv) \
                and b"-N" in argv and argv.index(b"-N") + 1 < len(argv):
            slurmds[argv[argv.index(b"-N") + 1].decode()] = pid
    for key in keys:
        if key.startswith("slurmd:") and key[7:] in slurmds:
            pids[key] = slurmds[key[7:]]
            continue
        fname = {"munged": "munged.pid", "slurmctld": "slurmctld.pid"}.get(key) or f"slurmd-{key[7:]}.pid"
        try:
            pids[key] = int((root / "run" / fname).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return pids


class RawBaseline:
    """Daemons started by bash, without simcluster: ``run('plain')`` in this shell's
    environment, ``run('tuned')`` with simcluster's daemons.SLURMD_ENV for slurmd.

    `up` makes the cluster directory (configs, key, ports) once; its daemons are then
    killed and the script generated from `up`'s step list restarts them from a clean
    state for every run.
    """

    VARIANTS = {"plain": {}, "tuned": daemons.SLURMD_ENV}

    def __init__(self, b: Bench, nodes: int):
        self.b, self.nodes, self.name = b, nodes, f"bench-raw-{nodes}"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "SIMCLUSTER_")) and k not in daemons.SLURMD_ENV}
        self.res: Dict[str, Dict] = {v: {"up": [], "cpu": [], "others": [], "mem": None} for v in self.VARIANTS}
        b.down_quietly(self.name)
        b.sc("up", "--name", self.name, "--nodes", str(nodes), *gpu_flags(nodes), "--wait", "300")
        self.root, self.cluster = b.root(self.name), load(self.name)
        # A loop written by hand starts each node with the standard programs (nsenter, sh,
        # unshare, tini, mount): the chain `up` runs where simcluster-node-start is not built.
        chain = names.node_starter
        names.node_starter = lambda: None
        try:
            self.cluster.state.placement = self.cluster.provider.placement(self.cluster.state).to_dict()
            self.cluster = Cluster(self.cluster.state, self.cluster.provider)
        finally:
            names.node_starter = chain
        for variant, slurmd_env in self.VARIANTS.items():
            (self.root / f"raw-start-{variant}.sh").write_text(raw_script(self.cluster, slurmd_env))
        reset_cluster_dir(self.cluster)

    def run(self, variant: str) -> None:
        run = run_timed(["bash", str(self.root / f"raw-start-{variant}.sh")], self.env, timeout=300)
        if run.rc != 0:
            raise RuntimeError(f"raw baseline failed (exit {run.rc}): {run.err}")
        pids = raw_pids(self.root, self.cluster.state.pids)
        cpu = daemon_cpu(pids)
        r = self.res[variant]
        r["up"].append(run.wall)
        r["cpu"].append(cpu["slurmd_ms"])
        r["others"].append(others_share(run, cpu["total"]))
        if r["mem"] is None:
            r["mem"] = measure_memory(pids)
        reset_cluster_dir(self.cluster)
        log(f"  raw ({variant}) {self.nodes:>3} nodes run {len(r['up'])}: all idle in {run.wall:.2f}s, "
            f"slurmd start-up CPU {cpu['slurmd_ms']:.0f} ms each, others used {100 * r['others'][-1]:.0f}% of the CPUs")

    def close(self) -> None:
        self.b.down_quietly(self.name)


# -- simcluster runs ----------------------------------------------------------------------------
MAX_FAKE_GPUS = 256  # what --fake-gpus K allows


def gpu_flags(nodes: int) -> List[str]:
    """A fake GPU per node (a distinct device each, as --fake-gpus K numbers them) up to
    MAX_FAKE_GPUS nodes; bigger clusters have none."""
    return ["--fake-gpus", str(nodes)] if nodes <= MAX_FAKE_GPUS else []


MAX_FAILED_UPS = 2


def bench_size(b: Bench, nodes: int, repeat: int, with_raw: bool) -> Dict:
    """`repeat` runs of up/down, each followed by the raw baselines: interleaved, so that
    other load on the machine hits all of them alike."""
    name = f"bench-{nodes}"
    r: Dict = {"up": [], "down": [], "cpu": [], "others": [], "cli_rss_mb": 0.0, "mem": None, "failures": []}
    b.down_quietly(name)
    raw: Optional[RawBaseline] = None
    try:
        if with_raw and nodes <= RAW_MAX_NODES:
            raw = RawBaseline(b, nodes)
        while len(r["up"]) < repeat:
            i = len(r["up"])
            load_before = os.getloadavg()[0]  # the other work on the machine, before this run
            up = b.sc("up", "--name", name, "--nodes", str(nodes), *gpu_flags(nodes), "--wait", "300",
                      check=False)
            if up.rc != 0:
                # Record and retry: a failed run says something, but is no timing.
                first = (up.err.strip().splitlines() or ["(no output)"])[-1]
                r["failures"].append(first)
                log(f"  simcluster {nodes:>3} nodes: up FAILED (exit {up.rc}): {first}")
                b.down_quietly(name)
                if len(r["failures"]) > MAX_FAILED_UPS:
                    raise RuntimeError(f"up of {nodes} nodes failed {len(r['failures'])} times:\n{up.err}")
                continue
            r["up"].append(up.wall)
            r.setdefault("load", []).append(load_before)
            r["cli_rss_mb"] = max(r["cli_rss_mb"], up.maxrss_kb / 1024)
            pids = {k: int(v) for k, v in b.state(name)["pids"].items()}
            cpu = daemon_cpu(pids)
            r["cpu"].append(cpu["slurmd_ms"])
            r["others"].append(others_share(up, cpu["total"]))
            if i == 0:
                r["mem"] = measure_memory(pids)  # at rest, before any job ran
                r["breakdown"] = smaps_breakdown(pids["slurmd:node1"])
                # Untimed: prove the measured cluster works.
                status = json.loads(b.sc("status", "--name", name, "--json").out)
                if not status["healthy"]:
                    raise RuntimeError(f"{name} is up but not healthy: {status}")
                job = b.sc("exec", "--name", name, "--", "srun", f"-N{min(nodes, 2)}", "hostname")
                if len(job.out.split()) != min(nodes, 2):
                    raise RuntimeError(f"srun on {name} printed {job.out!r}")
            down = b.sc("down", "--name", name)
            r["down"].append(down.wall)
            log(f"  simcluster {nodes:>3} nodes run {i + 1}/{repeat}: up {up.wall:.2f}s, down {down.wall:.2f}s, "
                f"slurmd start-up CPU {cpu['slurmd_ms']:.0f} ms each, others used {100 * r['others'][-1]:.0f}% "
                f"of the CPUs, CLI max RSS {up.maxrss_kb / 1024:.0f} MB")
            for variant in RawBaseline.VARIANTS if raw else ():
                raw.run(variant)
    finally:
        b.down_quietly(name)
        if raw:
            raw.close()
    if raw:
        r["raw"] = raw.res
    return r


# -- machine and report -------------------------------------------------------------------------
def machine() -> Dict[str, str]:
    def field(path: str, key: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return line[len(key):].lstrip(" \t:=").strip().strip('"')
        except OSError:
            pass
        return "?"

    mem_kb = field("/proc/meminfo", "MemTotal").split()[0]
    slurm = subprocess.run(["slurmd", "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    debian = Path("/etc/debian_version").read_text().strip() if Path("/etc/debian_version").exists() else "?"
    return {
        "cpu": field("/proc/cpuinfo", "model name"),
        "cores": str(os.cpu_count()),
        "ram": f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb.isdigit() else "?",
        "kernel": platform.release(),
        "os": f"{field('/etc/os-release', 'PRETTY_NAME')} (debian_version {debian})",
        "slurm": slurm.strip(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def med(xs: List[float]) -> float:
    return statistics.median(xs)


def fmt3(xs: List[float]) -> str:
    return f"{min(xs):.2f} / {med(xs):.2f} / {max(xs):.2f}" if xs else "-"


def verdict(value: float, target: Optional[float]) -> str:
    if target is None:
        return "-"
    return f"≤ {target:g} s: {'PASS' if value <= target else 'MISS'}"


def report(results: Dict[int, Dict], mach: Dict[str, str]) -> str:
    env_text = " ".join(f"`{k}={v}`" for k, v in daemons.SLURMD_ENV.items())
    # The other pages' figures are quotes that scripts/figures.py fills from their tables
    # (`make bench` runs it last), so this intro never repeats a stale number.
    quote = lambda name: figures.fill(f'[?]({figures.FIGURES[name].page} "figure: {name}")')  # noqa: E731
    out = ["# Benchmarks", "",
           f"This page is the local backend. The docker backend (image from nothing {quote('docker-image-from-nothing')}, "
           f"training image {quote('docker-train-image')} more, cached rebuild {quote('docker-image-rebuild')}; "
           f"`up` to all-idle {quote('docker-up-2')} for 2 nodes, {quote('docker-up-8')} for 8) is",
           "in [benchmarks-docker.md](benchmarks-docker.md); `verify` on both backends in",
           "[benchmarks-verify.md](benchmarks-verify.md); accounting in",
           f"[benchmarks-accounting.md](benchmarks-accounting.md) (+{quote('accounting-extra')} for `up`; on docker "
           f"+{quote('docker-accounting-extra')},",
           "[benchmarks-accounting-docker.md](benchmarks-accounting-docker.md)).", "",
           "## Local backend", "",
           "Reproduce: `make bench` (runs `scripts/bench.py --out docs/benchmarks.md`, a few "
           "minutes). `--sizes 256 --repeat 3 --merge` re-runs one size and keeps the others' rows; "
           "`--quick --out /tmp/bench.md` is a one-run smoke test.", "",
           "## Machine", "",
           f"- CPU: {mach['cpu']}, {mach['cores']} cores; RAM {mach['ram']}",
           f"- OS: {mach['os']}, kernel {mach['kernel']}",
           f"- {mach['slurm']}, Python {mach['python']}",
           f"- Date: {mach['date']}", "",
           "## `up` to all-idle and `down` (wall seconds of the whole CLI command)", "",
           "`up` is `simcluster up --name bench-N --nodes N --fake-gpus N` (no GPUs above 256 nodes: `--fake-gpus` gives at most 256) from exec to exit "
           "(it exits once every node is idle); `down` is `simcluster down --name bench-N`. "
           "The raw baseline is a bash script generated from `up`'s step list that starts the same "
           "munged, slurmctld and slurmd command lines with the same configs, waits for munged's "
           "socket and slurmctld's port as `up` does, and polls `sinfo` on the schedule `up` uses "
           "(every 10 ms, backing off to 50 ms, or 250 ms above 16 nodes) until every node is "
           "idle: `raw plain` in an ordinary environment, `raw tuned` with what simcluster adds "
           f"to each slurmd's environment ({env_text}). "
           "`overhead` = `up` − `raw tuned` (medians): what simcluster itself adds (Python start-up, "
           "writing configs, checks). `slurmd CPU` is the CPU time one slurmd used to start "
           "(mean over the nodes, median over the runs); unlike wall time it hardly depends on "
           "other load. `others` is the share of the machine's CPUs that processes other than "
           "the benchmark's kept busy during the `up` runs / the raw runs (medians): the noise.", "",
           "`up / raw plain`: the median `up` against the median hand-written loop (target at 64 "
           "nodes: 0.8). `floor` is the slurmd CPU of the `up` runs times the nodes over the "
           "machine's cores: the wall time if the machine did nothing but start slurmds, all at "
           "once (what is left above it is the kernel's namespace and mount work, the Python "
           "CLI, slurmctld's registrations). `load` is the 1-minute load average before each "
           "`up` (median): other work on the machine.", "",
           "| nodes | runs | up min / median / max | target | floor | raw plain | raw tuned | overhead "
           "| up / raw plain | down min / median / max | target | slurmd CPU ms: up / raw plain / raw tuned "
           "| others | load | measured |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for nodes, r in sorted(results.items()):
        raw = r.get("raw") or {}
        plain, tuned = raw.get("plain", {}), raw.get("tuned", {})
        over = f"{med(r['up']) - med(tuned['up']):+.2f}" if tuned else "-"
        cpu = " / ".join(f"{med(x['cpu']):.0f}" if x else "-" for x in (r, plain, tuned))
        raw_others = plain.get("others", []) + tuned.get("others", [])
        others = f"{100 * med(r['others']):.0f}% / " + (f"{100 * med(raw_others):.0f}%" if raw_others else "-")
        ratio = med(r["up"]) / med(plain["up"]) if plain.get("up") else None
        ratio_txt = "-" if ratio is None else f"{ratio:.2f}" + (
            f" (≤ {RAW_RATIO_TARGET[nodes]:g}: {'PASS' if ratio <= RAW_RATIO_TARGET[nodes] else 'MISS'})"
            if nodes in RAW_RATIO_TARGET else "")
        floor = med(r["cpu"]) * nodes / 1000.0 / (os.cpu_count() or 1)
        load = f"{med(r['load']):.1f}" if r.get("load") else "-"
        out.append(f"| {nodes} | {len(r['up'])} | {fmt3(r['up'])} | {verdict(med(r['up']), UP_TARGET.get(nodes))} "
                   f"| {floor:.2f} | {fmt3(plain.get('up', []))} | {fmt3(tuned.get('up', []))} | {over} | {ratio_txt} "
                   f"| {fmt3(r['down'])} | {verdict(max(r['down']), DOWN_TARGET.get(nodes))} | {cpu} | {others} | {load} "
                   f"| {r.get('when', '?')} |")
    out += ["", "`target` for `up` is on the median, for `down` on the slowest run."]
    failures = [(nodes, f) for nodes, r in sorted(results.items()) for f in r["failures"]]
    if failures:
        out += ["", "Failed `up` runs (retried, not counted in the timings):", ""]
        out += [f"- {nodes} nodes: `{text}`" for nodes, text in failures]
    out += ["",
            "## Memory per virtual node while the cluster is idle (MB)", "",
            "RSS counts every page a process maps, including shared library pages that every "
            "slurmd maps from the same physical memory; PSS splits each shared page among the "
            "processes that map it, so the sum of PSS is the memory really used. `all daemons "
            "PSS / node` also spreads slurmctld and munged over the nodes.", "",
            "`node PSS` is everything one node runs at rest: its slurmd and the processes that hold "
            "its namespaces (simcluster-node-start, twice: outside and as the node's pid 1; unshare and tini "
            "where it is not built).", "",
            f"| nodes | slurmd RSS mean (max) | target ≤ {RSS_TARGET_MB:g} | of which shared / private "
            "| slurmd PSS | node PSS | target | all daemons PSS / node | slurmctld + munged RSS / PSS "
            "| raw plain slurmd RSS / PSS | raw tuned slurmd RSS / PSS | `up` CLI max RSS |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for nodes, r in sorted(results.items()):
        m, raw = r["mem"], r.get("raw") or {}
        rawm = [raw.get(v, {}).get("mem") for v in ("plain", "tuned")]
        rawtxt = [f"{x['rss_mean']:.2f} / {x['pss_mean']:.2f}" if x else "-" for x in rawm]
        ok = "PASS" if m["rss_mean"] <= RSS_TARGET_MB else "MISS"
        node_pss = m.get("node_pss_mean")
        pss_target = PSS_PER_NODE_TARGET_MB.get(nodes)
        pss_verdict = "-" if pss_target is None or node_pss is None else \
            f"≤ {pss_target:g}: {'PASS' if node_pss <= pss_target else 'MISS'}"
        out.append(f"| {nodes} | {m['rss_mean']:.2f} ({m['rss_max']:.2f}) | {ok} "
                   f"| {m['shared_mean']:.2f} / {m['private_mean']:.2f} | {m['pss_mean']:.2f} "
                   f"| {'-' if node_pss is None else f'{node_pss:.2f}'} | {pss_verdict} "
                   f"| {m['pss_per_node_all']:.2f} | {m['ctl_rss']:.1f} / {m['ctl_pss']:.1f} "
                   f"| {rawtxt[0]} | {rawtxt[1]} | {r['cli_rss_mb']:.0f} |")
    biggest = max(results)
    rows = results[biggest].get("breakdown") or []
    if rows:
        out += ["", f"Where the RSS of one slurmd goes ({biggest}-node cluster, node1, MB):", "",
                "| mapped from | RSS | PSS |", "|---|---|---|"]
        out += [f"| {what} | {rss:.2f} | {pss:.2f} |" for what, rss, pss in rows]
        out.append(f"| total | {sum(r[1] for r in rows):.2f} | {sum(r[2] for r in rows):.2f} |")
    data = json.dumps(_rounded({str(k): v for k, v in sorted(results.items())}), separators=(",", ":"))
    return "\n".join(out) + f"\n\n{DATA_PREFIX}{data} -->\n{END_MARKER}\n"


def _rounded(value):
    """``value`` with every float rounded to 4 places (a compact bench-data comment)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def previous_results(path: Path) -> Dict[int, Dict]:
    """The results embedded in an earlier report (for --merge), or {}."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    start = text.find(DATA_PREFIX)
    if start < 0:
        return {}
    end = text.find(" -->", start)
    try:
        return {int(k): v for k, v in json.loads(text[start + len(DATA_PREFIX):end]).items()}
    except ValueError:
        return {}


def write_report(path: Path, generated: str) -> None:
    """Replace the generated part of ``path``, keeping what is written below END_MARKER."""
    kept = ""
    if path.exists():
        old = path.read_text()
        if END_MARKER in old:
            kept = old.split(END_MARKER, 1)[1].lstrip("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(generated + ("\n" + kept if kept else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="node counts, e.g. 2,16,64,256,512,1024")
    ap.add_argument("--repeat", type=int, default=None, help="runs per size [default: 5/5/3/3/2/2 for 2/16/64/256/512/1024]")
    ap.add_argument("--quick", action="store_true", help="sizes 2,16,64, one run each (a smoke run)")
    ap.add_argument("--no-raw", action="store_true", help="skip the raw-daemon baseline")
    ap.add_argument("--home", default="/tmp/sc-bench", help="SIMCLUSTER_HOME for the benchmark clusters")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other sizes' results already in --out (re-run one disturbed size)")
    args = ap.parse_args()
    sizes = [2, 16, 64] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    home = Path(args.home)
    home.mkdir(parents=True, exist_ok=True)
    # Time the CLI as an installed package runs: from byte code. (With PYTHONDONTWRITEBYTECODE
    # set, as in some containers, every command would otherwise compile its modules afresh.)
    compileall.compile_dir(str(REPO / "provisioner"), quiet=1)
    b = Bench(home)
    mach = machine()
    log(f"bench: {mach['cpu']}, {mach['cores']} cores, {mach['slurm']}; SIMCLUSTER_HOME={home}")

    def stop(signum, frame):  # SIGTERM: unwind through the finally blocks that tear down
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)

    results: Dict[int, Dict] = previous_results(Path(args.out)) if args.merge else {}
    for nodes in sizes:
        repeat = 1 if args.quick else (args.repeat or DEFAULT_REPEAT.get(nodes, 3))
        log(f"{nodes} nodes, {repeat} runs")
        r = bench_size(b, nodes, repeat, with_raw=not args.no_raw)
        r["when"] = time.strftime("%Y-%m-%d %H:%M")
        results[nodes] = r
        log(f"  median up {med(r['up']):.2f}s, down {med(r['down']):.2f}s; "
            f"slurmd RSS {r['mem']['rss_mean']:.2f} MB, PSS {r['mem']['pss_mean']:.2f} MB")
    write_report(Path(args.out), report(results, mach))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
