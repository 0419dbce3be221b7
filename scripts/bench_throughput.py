#!/usr/bin/env python3
"""Benchmark CI speed on the local backend: `simcluster test --suite basic`, and many
trivial jobs on `up --nodes 4` (node shapes as `up` makes them: the host's CPUs and memory).

1. `simcluster test --nodes 2 --fake-gpus 2 --suite basic`: up + verify + down, wall time.
2. N separate `sbatch --wrap true` submitted one by one from a bash loop: seconds from the
   first sbatch to an empty queue (`squeue` lists nothing), and the submission loop alone.
3. `sbatch --array=0-(N-1) --wrap true`: seconds from sbatch to an empty queue.
Every job must end COMPLETED (slurmctld's own counters, `sdiag`), or the run is an error.
Each run starts once slurmctld has purged the jobs of the run before (MinJobAge), and the
queue is polled every 0.25 s.

Beside each figure: the CPU time the run cost (the cluster's daemons, step daemons and jobs,
read from cgroup v1 cpuacct counters, plus the benchmark's own sbatch/squeue calls), per job,
and the floor it sets: that CPU spread over all of the machine's cores, the wall time the run
would take if it did nothing but compute. Where no cpuacct hierarchy can be written (not
root, cgroup v2 only), the CPU is the whole machine's busy time (/proc/stat), which also
counts other work. `others` is the share of the cores that other work kept busy meanwhile.

With --baseline, 2 and 3 are measured again on the same cluster after removing the
Epilog line from its slurm.conf (`scontrol reconfigure`): the scheduling as it was before
the Epilog, under the same load (with the container plugin the Epilog is the script that
also removes named containers, docs/benchmarks-throughput.md). The host is shared: the load average is printed
with every number. Uses its own SIMCLUSTER_HOME; every cluster goes down at the end.

Usage: python scripts/bench_throughput.py [--out docs/benchmarks-throughput.md]
           [--repeat 3] [--jobs 1000] [--baseline] [--name-prefix bench]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
# The goals on 2 cores (docs/benchmarks-throughput.md says which floor stops each).
TARGETS = {"basic": 4.0, "separate": 8.0, "array": 5.0}
# Each poll is an squeue: a Slurm client's CPU on the same 2 cores the jobs need.
POLL_S = 0.25
END_MARKER = "<!-- end of generated results: text below this line is kept by scripts/bench_throughput.py -->"


def log(msg: str) -> None:
    print(msg, flush=True)


def load() -> float:
    return os.getloadavg()[0]


def machine() -> Dict:
    # slurmd -V needs no slurm.conf (the client commands want one before they print a version).
    proc = subprocess.run(["slurmd", "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return {"host": platform.node(), "cores": os.cpu_count(), "kernel": platform.release(),
            "slurm": proc.stdout.strip().replace("slurm-wlm", "Slurm"), "load_at_start": os.getloadavg(),
            "processes": sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())}


def cli(args: List[str], home: Path, check: bool = True, preexec=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, cwd=REPO, preexec_fn=preexec,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=check)


def machine_busy_s() -> float:
    """CPU seconds all cores have been busy since boot (/proc/stat, idle and iowait excluded)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of the processes this benchmark started and waited for (sbatch, squeue)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class ClusterCpu:
    """CPU seconds one cluster's processes have used: its controller and munged (started in
    a cpuacct cgroup of the benchmark's own, which they inherit from `up`), and every node
    (slurmd, its step daemons, the jobs; the local backend starts each node in a cgroup of
    its own, read where it is). Step daemons and jobs come and go in thousands; a cgroup
    counts them all, where /proc would miss every process that has ended.

    Where no cgroup can be made (not root, no cgroup v1 cpuacct), ``exact`` is False and
    ``used()`` is the whole machine's busy time, other work included."""

    def __init__(self) -> None:
        self.own: Optional[Path] = None
        try:
            cg = CPUACCT / f"simcluster-bench-{os.getpid()}"
            cg.mkdir()
            self.own = cg
        except OSError:
            pass
        self.nodes: List[Path] = []

    @property
    def exact(self) -> bool:
        return self.own is not None

    def enter(self) -> None:
        """preexec_fn of `up`: the command, and every daemon it starts, count here."""
        if self.own:
            (self.own / "cgroup.procs").write_text(str(os.getpid()))

    def find_nodes(self, conf: Path) -> None:
        """The cpuacct cgroups of the cluster's slurmd processes (those outside our own)."""
        found = set()
        for proc in Path("/proc").iterdir():
            try:
                if not proc.name.isdigit() or (proc / "comm").read_text().strip() != "slurmd" \
                        or str(conf) not in (proc / "cmdline").read_text().replace("\0", " "):
                    continue
                for line in (proc / "cgroup").read_text().splitlines():
                    _, controllers, path = line.split(":", 2)
                    if "cpuacct" in controllers.split(","):
                        found.add(CPUACCT / path.lstrip("/"))
            except OSError:
                continue
        self.nodes = sorted(p for p in found if self.own is None or not str(p).startswith(str(self.own)))

    def used(self) -> float:
        if not self.own:
            return machine_busy_s()
        total = 0
        for cg in [self.own, *self.nodes]:
            try:
                total += int((cg / "cpuacct.usage").read_text())
            except (OSError, ValueError):
                pass  # a node that went away (its slurmd killed) counts no more
        return total / 1e9

    def close(self) -> None:
        if self.own:
            try:
                self.own.rmdir()
            except OSError:
                pass  # a daemon still in it: `down` failed, and says why


def bench_test_basic(home: Path, name: str) -> Dict:
    la = load()
    t0 = time.monotonic()
    proc = cli(["test", "--name", name, "--nodes", "2", "--fake-gpus", "2", "--suite", "basic", "--json"],
               home, check=False)
    wall = time.monotonic() - t0
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    bad = [c["name"] for c in report.get("checks", []) if c["status"] == "FAIL"]
    if proc.returncode != 0 or bad:
        raise SystemExit(f"simcluster test --suite basic failed ({bad}):\n{proc.stderr[-3000:]}")
    return {"seconds": wall, "load": la,
            "checks": {c["name"]: c["seconds"] for c in report.get("checks", [])}}


class Jobs:
    """Slurm commands against one cluster (its slurm.conf), from a scratch directory."""

    def __init__(self, conf: Path, workdir: Path):
        self.env = dict(os.environ, SLURM_CONF=str(conf))
        self.workdir = workdir

    def run(self, argv: List[str], check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, cwd=self.workdir, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, check=check, timeout=600)

    def counters(self) -> Dict[str, int]:
        out = self.run(["sdiag"]).stdout
        return {k: int(v) for k, v in re.findall(r"^\s*Jobs (submitted|completed|failed|canceled):\s+(\d+)", out, re.M)}

    def wait_empty(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.run(["squeue", "--noheader", "--format=%i"]).stdout.strip():
            if time.monotonic() > deadline:
                raise SystemExit(f"queue not empty after {timeout:.0f}s")
            time.sleep(POLL_S)

    def wait_purged(self, timeout: float = 90) -> None:
        """Until slurmctld has dropped the finished jobs of the last run (MinJobAge=30 s):
        every run then starts from the same state, as a CI job's first burst does, not
        with 1000 records of the run before in every squeue answer."""
        deadline = time.monotonic() + timeout
        while self.run(["squeue", "--noheader", "--states=all", "--format=%i"]).stdout.strip():
            if time.monotonic() > deadline:
                raise SystemExit(f"slurmctld still lists finished jobs after {timeout:.0f}s")
            time.sleep(1)

    def clean(self) -> None:
        for f in self.workdir.glob("slurm-*.out"):
            f.unlink()


def measure(jobs: Jobs, kind: str, n: int, cpu: ClusterCpu) -> Dict:
    """Submit ``n`` trivial jobs (``kind`` separate or array); seconds until the queue is empty,
    and the CPU seconds the cluster and the submitting commands used meanwhile."""
    jobs.wait_empty()
    jobs.wait_purged()
    before = jobs.counters()
    la = load()
    cluster0, client0, busy0 = cpu.used(), children_cpu_s(), machine_busy_s()
    t0 = time.monotonic()
    submit_s = None
    if kind == "separate":
        # One sbatch process per job, as a user's shell loop or a test suite submits them.
        jobs.run(["bash", "-c", f"for i in $(seq {n}); do sbatch -Q --wrap true || exit 1; done"])
        submit_s = time.monotonic() - t0
    else:
        jobs.run(["sbatch", "-Q", f"--array=0-{n - 1}", "--wrap", "true"])
    jobs.wait_empty()
    seconds = time.monotonic() - t0
    cluster, client, busy = cpu.used() - cluster0, children_cpu_s() - client0, machine_busy_s() - busy0
    after = jobs.counters()
    done = {k: after.get(k, 0) - before.get(k, 0) for k in ("completed", "failed", "canceled")}
    if done["completed"] != n or done["failed"] or done["canceled"]:
        raise SystemExit(f"{kind}: expected {n} jobs COMPLETED, slurmctld counted {done}")
    outputs = len(list(jobs.workdir.glob("slurm-*.out")))
    jobs.clean()
    if outputs != n:
        raise SystemExit(f"{kind}: {outputs} output files for {n} jobs")
    cores = os.cpu_count() or 1
    ours = cluster + client if cpu.exact else cluster
    return {"seconds": seconds, "submit_seconds": submit_s, "load": la, "jobs_per_s": n / seconds,
            "cpu_s": ours, "client_cpu_s": client, "cpu_ms_per_job": 1000.0 * ours / n,
            "floor_s": ours / cores, "others": max(0.0, busy - ours) / (seconds * cores)}


def without_epilog(conf: Path, jobs: Jobs) -> None:
    """The scheduling as it was before the no-op Epilog: drop the line, reconfigure."""
    text = conf.read_text()
    conf.write_text("".join(line for line in text.splitlines(keepends=True) if not line.startswith("Epilog=")))
    jobs.run(["scontrol", "reconfigure"])
    time.sleep(2)  # slurmd re-reads its config asynchronously
    shown = jobs.run(["scontrol", "show", "config"]).stdout
    if re.search(r"^Epilog\s*=\s*/", shown, re.M):
        raise SystemExit("Epilog still configured after reconfigure")


def fmt(xs: List[float]) -> str:
    return f"{min(xs):.1f} / {statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-"


def med(xs: List[float], form: str) -> str:
    return form.format(statistics.median(xs)) if xs else "-"


CPU_SOURCE = {True: "the cluster's processes (cgroup cpuacct: controller, munged, each node's slurmd, "
                    "step daemons and jobs) plus the benchmark's sbatch and squeue calls",
              False: "the whole machine's busy time (/proc/stat; no cpuacct cgroup could be made), "
                     "other work included"}


def with_load(runs: List[Dict], key: str = "seconds") -> str:
    return ", ".join(f"{r[key]:.1f} ({r['load']:.1f})" for r in runs)


def render(info: Dict, results: Dict, args) -> str:
    m = info
    lines = [
        "# CI-speed benchmarks: `test --suite basic` and 1000 small jobs",
        "",
        f"Generated by `python scripts/bench_throughput.py --repeat {args.repeat} --jobs {args.jobs}"
        f"{' --baseline' if args.baseline else ''}` (part of `make bench`) on {m['host']}: {m['cores']} CPU cores, "
        f"Linux {m['kernel']}, {m['slurm']}, {m['processes']} processes on the host, load average at start "
        f"{m['load_at_start'][0]:.2f} / {m['load_at_start'][1]:.2f} / {m['load_at_start'][2]:.2f} (1/5/15 min).",
        "The host is shared with other work, so each number is followed by the 1-minute load",
        "average when that run started. Seconds: min / median / max over the runs.",
        f"CPU per job: {CPU_SOURCE[bool(results.get('exact'))]}; floor: that CPU over the "
        f"{m['cores']} cores, the wall time at every core busy with this run alone; others: the share",
        "of the cores other work kept busy meanwhile (medians over the runs).",
        "",
        "| what | seconds (min / median / max) | each run (load) | CPU ms per job | floor s | others | target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = [("basic", "`simcluster test --nodes 2 --fake-gpus 2 --suite basic` (up, verify, down)", "tuned"),
            ("separate", f"{args.jobs} separate `sbatch --wrap true` on `up --nodes 4`, first sbatch to empty queue",
             "tuned"),
            ("submit", f"  of which the {args.jobs} sbatch calls themselves", "tuned"),
            ("array", f"`sbatch --array=0-{args.jobs - 1} --wrap true` on `up --nodes 4`, to empty queue", "tuned")]
    if args.baseline:
        rows += [("separate", f"{args.jobs} separate jobs, without the Epilog line", "baseline"),
                 ("submit", "  of which the sbatch calls themselves", "baseline"),
                 ("array", f"array of {args.jobs}, without the Epilog line", "baseline")]
    for key, label, which in rows:
        runs = results[which].get("separate" if key == "submit" else key, [])
        field = "submit_seconds" if key == "submit" else "seconds"
        target = f"<= {TARGETS[key]:.0f}" if key in TARGETS and which == "tuned" else ""
        cpu = [r["cpu_ms_per_job"] for r in runs if "cpu_ms_per_job" in r] if key != "submit" else []
        floor = [r["floor_s"] for r in runs if "floor_s" in r] if key != "submit" else []
        others = [r["others"] for r in runs if "others" in r] if key != "submit" else []
        lines.append(f"| {label} | {fmt([r[field] for r in runs])} | {with_load(runs, field)} | "
                     f"{med(cpu, '{:.1f}')} | {med(floor, '{:.1f}')} | {med(others, '{:.0%}')} | {target} |")
    checks: Dict[str, List[float]] = {}
    for r in results["tuned"].get("basic", []):
        for name, s in r["checks"].items():
            checks.setdefault(name, []).append(s)
    if checks:
        lines += ["", "Per check of `--suite basic` (they overlap each other):", "",
                  "| check | seconds (min / median / max) |", "| --- | --- |"]
        lines += [f"| {name} | {fmt(xs)} |" for name, xs in checks.items()]
    return "\n".join(lines) + "\n"


def write(out: Path, text: str) -> None:
    kept = ""
    if out.exists() and END_MARKER in out.read_text():
        kept = out.read_text().split(END_MARKER, 1)[1]
    out.write_text(text + "\n" + END_MARKER + (kept or "\n"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks-throughput.md"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--baseline", action="store_true", help="also measure without the no-op Epilog")
    ap.add_argument("--name-prefix", default="bench", help="cluster names: PREFIX-basic, PREFIX-jobs")
    ap.add_argument("--skip-basic", action="store_true")
    args = ap.parse_args()

    info = machine()
    log(f"machine: {info['host']}, {info['cores']} cores, {info['slurm']}, {info['processes']} processes, "
        f"load average {' '.join(f'{x:.2f}' for x in info['load_at_start'])}")
    home = Path(tempfile.mkdtemp(prefix="sc-tput-", dir="/tmp"))
    scratch = Path(tempfile.mkdtemp(prefix="sc-tput-jobs-", dir="/tmp"))
    results: Dict = {"tuned": {}, "baseline": {}}
    name = f"{args.name_prefix}-jobs"
    cpu = ClusterCpu()
    try:
        if not args.skip_basic:
            for i in range(args.repeat):
                r = bench_test_basic(home, f"{args.name_prefix}-basic")
                results["tuned"].setdefault("basic", []).append(r)
                log(f"test --suite basic run {i + 1}: {r['seconds']:.1f}s (load {r['load']:.2f})")
        cli(["up", "--name", name, "--nodes", "4"], home, preexec=cpu.enter)
        conf = home / name / "etc" / "slurm.conf"
        cpu.find_nodes(conf)
        results["exact"] = cpu.exact
        jobs = Jobs(conf, scratch)
        phases = [("tuned", None)] + ([("baseline", without_epilog)] if args.baseline else [])
        for which, prepare in phases:
            if prepare:
                prepare(conf, jobs)
            for i in range(args.repeat):
                for kind in ("separate", "array"):
                    r = measure(jobs, kind, args.jobs, cpu)
                    results[which].setdefault(kind, []).append(r)
                    extra = f", sbatch loop {r['submit_seconds']:.1f}s" if r["submit_seconds"] else ""
                    log(f"{which} {kind} x{args.jobs} run {i + 1}: {r['seconds']:.1f}s "
                        f"({r['jobs_per_s']:.0f} jobs/s{extra}; {r['cpu_ms_per_job']:.1f} ms CPU per job, "
                        f"floor {r['floor_s']:.1f}s, others {r['others']:.0%}; load {r['load']:.2f})")
    finally:
        cli(["down", "--name", name], home, check=False)
        cpu.close()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.out:
        write(Path(args.out), render(info, results, args))
        log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
