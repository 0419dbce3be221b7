#!/usr/bin/env python3
"""Benchmark `simcluster verify` on a 2-node fake-GPU cluster, each figure beside its floor.

Figures (local backend):
  * `simcluster test --nodes 2 --fake-gpus 2 --suite basic`: up -> verify basic -> down, the
    CI figure, on a fresh cluster each run (what CI pays);
  * the same with `--suite all` (skipped with --no-all);
  and per backend (--backends local,docker), on one standing cluster: `verify --suite basic`
  and `verify --suite all`, with the seconds of every check;
  * the suites `all` leaves out or that need a cluster made for them, each on a standing
    local cluster made for it: `verify --suite signals` (2 nodes), `verify --suite faults`
    (3 nodes, `--fast-failure`), `verify --suite rest` (2 nodes, `--rest`), and `simcluster
    check --run examples/train_ddp.sh` (its own throwaway cluster: up, dry run, down);
    skipped with --no-other, alone with --other-only (which rewrites only that section of
    an existing page); --other-repeat runs each (default 1: minutes of Slurm's fixed timers).

Each run records the 1-minute load average when it starts and, for verify on a standing
cluster, the CPU seconds of the simcluster process and the Slurm commands it ran (user+sys:
ours; the daemons' and the jobs' CPU are not in it). For `test` that figure would also hold
the daemons `down` reaps (and their jobs), so it is left out.
Writes docs/benchmarks-verify.md with the machine, the load averages and the floor beside
each figure: what Slurm's own fixed timers leave (see FLOORS and the "Where the time goes"
section it writes). Uses its own SIMCLUSTER_HOME, so it never touches other clusters.

Usage: python scripts/bench_verify.py [--out docs/benchmarks-verify.md] [--repeat 3]
       [--backends local,docker] [--no-all] [--no-other | --other-only] [--other-repeat 1]
       [--raw FILE] [--from-raw FILE]
(--raw saves every run's numbers as JSON; --from-raw writes the page from such a file
without running anything.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from benchlib import SIMCLUSTER  # noqa: E402

TARGETS = {"test-basic": 4.0, "test-all": 30.0}
# What is left when everything of ours is cut (seconds, 2 cores, Slurm 22.05): the parts
# are explained in WHERE_THE_TIME_GOES below.
FLOORS = {
    "test-basic": ("about 3 s: CLI start 0.3 + up 0.15 + basic.requeue's Slurm chain 2-2.5 "
                   "(kill 1.7, next whole second, scheduler tick <= 1) + down 0.15"),
    "test-all": ("the larger of about 31 s (slurmctld's first time-limit pass comes 30-31 s after it "
                 "starts: signals.time-limit waits for it) and basic + the four training suites one after "
                 "the other, CPU-bound on both cores (5-9 s each on an idle host)"),
    "verify-basic": "about 2.5 s: basic.requeue's Slurm chain",
    "verify-all": "0-31 s for signals.time-limit (the pass's phase), else the training suites' CPU",
}

WHERE_THE_TIME_GOES = """\
## Where the time goes

Measured on Slurm 22.05.8 from slurmctld/slurmd logs (`SlurmctldDebug=debug2`) and the
source of the release; these are Slurm's own fixed timers, not settings:

- **A fresh slurmctld's first scheduling pass comes 3 s after it starts.** A submitted batch
  job only asks for a pass (`queue_job_scheduler`); the background loop runs it once
  `batch_sched_delay` has passed since the last one, and that value is read from
  `SchedulerParameters` by the pass itself: until the first pass, the compiled-in default
  of 3 s holds (simcluster's `batch_sched_delay=0` counts only from then on). An interactive
  allocation (`srun` without sbatch) is placed by the allocate RPC itself, and its end's
  epilog-complete message runs a pass at once: `basic.nodes` runs `srun -N1 true` before any
  batch job, so on a cluster `up` just made the batch jobs start ~0.1 s after submission
  instead of 3 s after slurmctld started (this was most of the gap between `test --suite
  basic` and `verify --suite basic`).
- **Later passes: within a second.** After a submission, a release (`scontrol update
  StartTime=now`) or a node's registration, the next pass is the background loop's next
  turn (every ~1 s); a job's end runs one at once (epilog-complete, hence `Epilog=/bin/true`
  in the template).
- **Jobs start in submission order per partition.** A job that does not fit blocks every
  later job of its partition until the backfill scheduler's next pass (30 s), so the
  checks whose jobs wait on Slurm between their parts (`basic.requeue`,
  `basic.dependency`, `basic.isolation`, `basic.container`: `early` in verify/suites.py)
  submit first and their waits overlap the other checks' jobs, and those whose jobs wait
  for every CPU of a node (`basic.srun-env`, `basic.mpi`, `basic.cpus-per-task`: `wide`)
  submit last, so they do not stop the small jobs behind them.
- **A requeue costs ~1.7 s of kill, and its node takes no job meanwhile.** `scontrol
  requeue` kills the running batch script; proctrack/cgroup finds its processes still there
  right after the signal and sleeps 1 s before it looks again, and slurmd polls for the
  step's end at 0.02, 0.07, 0.17, 0.67 and 1.67 s before it runs the epilog. Until then the
  node is COMPLETING, and slurmctld allocates no new job on a completing node (node_scheduler.c
  leaves `cg_node_bitmap` out), so with submission order every later job that needs that
  node waits too: this is the critical path of `--suite basic` (`basic.requeue` runs on the
  partition's last node, away from `basic.dependency`'s parent on the first). The job may
  start again only in a later whole second than the kill (slurmd refuses an older
  credential), and AuthInfo's cred_expire (120 s) holds it back unless released: verify
  releases it at the first second it may. A job script that exits by itself right after
  `scontrol requeue` leaves nothing to kill: measured, the requeue is then done 80 ms after
  the job started instead of 1.7 s, which would take about 1.5 s off `--suite basic`.
- **The time-limit pass runs every 30 s, 30 s after slurmctld starts.** `--signal` is sent,
  and a time limit enforced, only there (PERIODIC_TIMEOUT, compiled in), so
  `signals.time-limit` ends 30-31 s after slurmctld started on a fresh cluster, and 0-30 s
  after its job started on a standing one. That is the floor of `test --suite all`; the
  training suites (each CPU-bound on both cores) run beside it and end before it on an idle
  2-core machine.
- **simcluster's own, cut:** `basic.isolation` held its port for a fixed 2 s (now: for as long as one node
  takes to reach the other on it, milliseconds; one step instead of two);
  `basic.container` compressed its 3 MB squashfs image (0.3-0.5 s of CPU before its job could
  be submitted; now uncompressed, 0.1 s); `basic.requeue` saw the requeue up to 1.25 s late
  (a 0.25 s poll, and only once the kill had ended; now within 0.1 s of slurmctld counting
  the restart).
"""


def machine() -> str:
    return (f"{platform.node()}: {os.cpu_count()} CPU cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def timed(args: List[str], home: Path, timeout: float = 900) -> Dict:
    """Run `simcluster ARGS --json`: wall seconds, CPU seconds of the CLI, load average at the
    start, and the JSON report (the verify report; `test` prints the same)."""
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([SIMCLUSTER, *args, "--json"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = {"checks": [], "passed": False}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    bad = [c["name"] for c in report.get("checks", []) if c["status"] != "PASS"]
    if proc.returncode != 0 or bad:
        print(f"  NOT PASSED ({proc.returncode}): {', '.join(bad)}\n{proc.stderr[-2000:]}", flush=True)
    return {"wall": wall, "cpu": cpu, "load": load, "report": report, "passed": proc.returncode == 0 and not bad}


def bench_test(suite: str, repeat: int) -> List[Dict]:
    """`simcluster test --suite SUITE` on a fresh 2-node cluster, ``repeat`` times."""
    home = Path(tempfile.mkdtemp(prefix="scbv-", dir="/tmp"))
    runs = []
    try:
        for i in range(repeat):
            r = timed(["test", "--name", f"bt{i}", "--nodes", "2", "--fake-gpus", "2", "--suite", suite], home)
            runs.append(r)
            print(f"test --suite {suite} run {i + 1}: {r['wall']:.1f}s (CLI CPU {r['cpu']:.1f}s, "
                  f"load {r['load']:.1f})", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return runs


def bench_backend(backend: str, repeat: int, suites: List[str]) -> Dict[str, List[Dict]]:
    """{suite: [run...]} of `verify --suite S` on one standing cluster of ``backend``."""
    home = Path(tempfile.mkdtemp(prefix="scbv-", dir="/tmp"))
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    name = "bench"
    runs: Dict[str, List[Dict]] = {s: [] for s in suites}
    up = [SIMCLUSTER, "up", "--name", name, "--nodes", "2", "--fake-gpus", "2", "--backend", backend]
    try:
        if backend == "docker":  # the training suites need the -train image (cached after the first build)
            built = subprocess.run([SIMCLUSTER, "image", "build", "--train"], env=env, capture_output=True,
                                   text=True, check=True)
            up += ["--image", built.stdout.split()[1]]
        subprocess.run(up, env=env, capture_output=True, text=True, check=True)
        for i in range(repeat):
            for suite in suites:
                r = timed(["verify", "--name", name, "--suite", suite], home)
                runs[suite].append(r)
                print(f"{backend} run {i + 1} verify --suite {suite}: {r['wall']:.1f}s (load {r['load']:.1f})",
                      flush=True)
    finally:
        subprocess.run([SIMCLUSTER, "down", "--name", name], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    return runs


# The other suites (and check's dry run): key -> (the row's words, `up` options of the standing
# cluster it runs on or None for a command that makes its own, the command).
OTHER = {
    "signals": ("`verify --suite signals` on a standing local cluster (2 nodes)",
                ["--nodes", "2"], ["verify", "--suite", "signals"]),
    "faults": ("`verify --suite faults` on a standing local `--fast-failure` cluster (3 nodes)",
               ["--nodes", "3", "--fast-failure"], ["verify", "--suite", "faults"]),
    "rest": ("`verify --suite rest` on a standing local `--rest` cluster (2 nodes)",
             ["--nodes", "2", "--rest"], ["verify", "--suite", "rest"]),
    "check-run": ("`simcluster check --run examples/train_ddp.sh` (its own cluster: up, dry run, down)",
                  None, ["check", "--run", "--no-shellcheck", "examples/train_ddp.sh"]),
}
OTHER_BEGIN, OTHER_END = "<!-- other suites -->", "<!-- /other suites -->"


def bench_other(repeat: int) -> Dict[str, List[Dict]]:
    """{key: [run...]} of every OTHER command, each verify suite on one standing cluster made
    for it."""
    home = Path(tempfile.mkdtemp(prefix="scbv-", dir="/tmp"))
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    runs: Dict[str, List[Dict]] = {}
    try:
        for key, (_, up_args, command) in OTHER.items():
            name = f"bo-{key}"
            if up_args is not None:
                subprocess.run([SIMCLUSTER, "up", "--name", name, *up_args], env=env, capture_output=True,
                               text=True, check=True)
                command = [*command, "--name", name]
            try:
                runs[key] = []
                for i in range(repeat):
                    r = timed(command, home)
                    runs[key].append(r)
                    print(f"{' '.join(command)} run {i + 1}: {r['wall']:.1f}s (load {r['load']:.1f})", flush=True)
            finally:
                if up_args is not None:
                    subprocess.run([SIMCLUSTER, "down", "--name", name], env=env, capture_output=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return runs


def other_section(runs: Dict[str, List[Dict]], repeat: int) -> List[str]:
    """The page's section on the other suites, between its markers."""
    lines = [OTHER_BEGIN, "## The other suites and `check --run`", "",
             f"Each on a standing local cluster made for it (`check --run` makes its own), {repeat} run(s), "
             "seconds min / median / max; load as above.", "",
             "| command | wall | load |", "| --- | --- | --- |"]
    for key, (label, _, _) in OTHER.items():
        if key in runs:
            lines.append(f"| {label} | {fmt([r['wall'] for r in runs[key]])} | {loads(runs[key])} |")
    lines += ["", "Per check, the seconds each took:", ""]
    columns = [(f"local verify {k}", runs[k]) for k in OTHER if k in runs and OTHER[k][1] is not None]
    lines += check_table(columns)
    return lines + [OTHER_END]


def check_table(columns: List) -> List[str]:
    """| check | column... | rows of min / median / max seconds, one per check any run reported."""
    lines = ["| check | " + " | ".join(c for c, _ in columns) + " |", "| --- |" + " --- |" * len(columns)]
    names: List[str] = []
    for _, runs in columns:
        for r in runs:
            for c in r["report"].get("checks", []):
                if c["name"] not in names:
                    names.append(c["name"])
    for name in names:
        cells = []
        for _, runs in columns:
            xs = [c["seconds"] for r in runs for c in r["report"].get("checks", []) if c["name"] == name]
            cells.append(fmt(xs))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def splice_other(page: str, section: List[str]) -> str:
    """``page`` with its other-suites section replaced by ``section`` (put before "## Where the
    time goes" where it has none)."""
    text = "\n".join(section)
    if OTHER_BEGIN in page and OTHER_END in page:
        head, rest = page.split(OTHER_BEGIN, 1)
        return head + text + rest.split(OTHER_END, 1)[1]
    marker = "## Where the time goes"
    if marker in page:
        head, rest = page.split(marker, 1)
        return head + text + "\n\n" + marker + rest
    return page.rstrip("\n") + "\n\n" + text + "\n"


def fmt(xs: List[float]) -> str:
    return f"{min(xs):.1f} / {statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-"


def loads(runs: List[Dict]) -> str:
    xs = [r["load"] for r in runs]
    return f"{min(xs):.1f}-{max(xs):.1f}" if xs else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks-verify.md"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="local,docker", help="comma-separated: local, docker")
    ap.add_argument("--no-all", action="store_true", help="leave out the --suite all figures (no training stack)")
    other = ap.add_mutually_exclusive_group()
    other.add_argument("--no-other", action="store_true", help="leave out the other suites and check --run")
    other.add_argument("--other-only", action="store_true",
                       help="time only the other suites and check --run; rewrite that section of --out")
    ap.add_argument("--other-repeat", type=int, default=1,
                    help="runs of each other suite (default 1: their time is Slurm's fixed timers, minutes each)")
    ap.add_argument("--raw", help="also save every run's numbers to this JSON file")
    ap.add_argument("--from-raw", help="write the page from a --raw file, running nothing")
    args = ap.parse_args()
    if args.other_only:
        section = other_section(bench_other(args.other_repeat), args.other_repeat)
        Path(args.out).write_text(splice_other(Path(args.out).read_text(), section))
        print(f"wrote the other suites' section of {args.out}")
        return
    other: Dict[str, List[Dict]] = {}
    if args.from_raw:
        raw = json.loads(Path(args.from_raw).read_text())
        args.repeat, args.no_all, tests, standing = raw["repeat"], raw["no_all"], raw["tests"], raw["standing"]
        backends, stamp, where = raw["backends"], raw["date"], raw["machine"]
        other, args.other_repeat = raw.get("other", {}), raw.get("other_repeat", 1)
    else:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        suites = ["basic"] if args.no_all else ["basic", "all"]
        tests = {s: bench_test(s, args.repeat) for s in suites}
        standing = {b: bench_backend(b, args.repeat, suites) for b in backends}
        other = {} if args.no_other else bench_other(args.other_repeat)
        stamp, where = time.strftime("%Y-%m-%d"), machine()
        if args.raw:
            Path(args.raw).write_text(json.dumps({
                "repeat": args.repeat, "no_all": args.no_all, "backends": backends, "date": stamp, "machine": where,
                "tests": tests, "standing": standing, "other": other, "other_repeat": args.other_repeat}))
    suites = ["basic"] if args.no_all else ["basic", "all"]

    lines = [
        "# verify benchmarks",
        "",
        f"Generated by `python scripts/bench_verify.py --repeat {args.repeat} --backends {','.join(backends)}"
        f"{' --no-all' if args.no_all else ''}` on {where}, {stamp}, no GPU (jobs run "
        "on CPU with gloo). Cluster: 2 nodes, `--fake-gpus 2` (docker: the `-train` image). Times are "
        "seconds, min / median / max over the runs; load is the 1-minute load average when each run "
        "started (the host is shared: a load above 2 means other work shared the 2 cores); CLI CPU is "
        "the user+sys time of the simcluster process and the Slurm commands it ran (the daemons and "
        "jobs are not in it; left out for `test`, whose `down` reaps the daemons).",
        "",
        "| figure | wall | CLI CPU | load | target | floor |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for suite in suites:
        runs = tests[suite]
        key = f"test-{suite}"
        lines.append(f"| `simcluster test --nodes 2 --fake-gpus 2 --suite {suite}` (up, verify, down) | "
                     f"{fmt([r['wall'] for r in runs])} | - | {loads(runs)} | "
                     f"<= {TARGETS[key]:.0f} | {FLOORS[key]} |")
    for b in backends:
        for suite in suites:
            runs = standing[b][suite]
            lines.append(f"| `verify --suite {suite}` on a standing {b} cluster | {fmt([r['wall'] for r in runs])} | "
                         f"{fmt([r['cpu'] for r in runs])} | {loads(runs)} | | {FLOORS[f'verify-{suite}']} |")
    lines += ["", "Per check, the seconds each took (the basic checks start together, so theirs count from the "
              "suite's start; the training suites run one after the other):", ""]
    columns = [(f"test {s}", tests[s]) for s in suites] + [(f"{b} verify {s}", standing[b][s])
                                                          for b in backends for s in suites]
    lines += check_table(columns)
    if other:
        lines += [""] + other_section(other, args.other_repeat)
    lines += ["", WHERE_THE_TIME_GOES,
              "On docker, verify's Slurm commands run in the controller container (`docker exec`, about",
              "40 ms each, so the job tracker polls every 0.5 s instead of 0.2 s) and the jobs run in the",
              "node containers; the training jobs themselves take the same time as on the local backend.",
              ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
