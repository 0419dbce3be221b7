#!/usr/bin/env python3
"""Time `simcluster up` (to all-idle) and `down` of two source trees, interleaved, in one run.

Each tree is a checkout of the project (e.g. an old commit unpacked with
`git archive <commit> | tar -x -C /tmp/base`); both run with the same Python (this one),
as `python -m provisioner` with PYTHONPATH=<tree> from an empty directory, so neither
picks up the other's package (each tree's provisioner.__file__ is checked first).
For every size the runs alternate old/new (and the order flips each round), so load
from other work on the machine hits both alike. Every cluster has its own
SIMCLUSTER_HOME (<home>-old, <home>-new) and name (cmp-old-N, cmp-new-N) and is
downed whatever happens; at the end no process of theirs may be left.

Usage:
  git archive fe56e21 | (mkdir -p /tmp/base && tar -x -C /tmp/base)
  git archive HEAD    | (mkdir -p /tmp/new  && tar -x -C /tmp/new)
  python scripts/bench_compare.py --old /tmp/base --new /tmp/new [--sizes 2,64,256] [--runs 2:5,64:5,256:3]

Both trees are byte-compiled first (python -m compileall), as an installed package is;
--no-compile measures them as they are. `up`'s per-step times (its ' - ... done (0.12s)'
lines) are collected too and printed as medians, to show where a difference comes from;
`up inside` is the time `up` itself reports (lock taken to all idle), so `up` minus it
is Python start-up, imports, checks before the lock and exit.

--docker-runs N also times `up --backend docker --nodes 2` (each tree builds or reuses its
node image and starts one cluster first, untimed); --test-runs N times
`simcluster test --nodes 2 --fake-gpus 2 --suite basic` (up, verify basic, down).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

INSIDE = re.compile(r"nodes idle.* in (\d+\.\d+)s")  # up's own clock: from taking the lock to all idle
STEP_LINE = re.compile(r"^ - (.*?) \.\.\. done \((\d+\.\d+)s\)$")
# Step descriptions carry numbers that differ per run (ports, node counts): drop them.
DIGITS = re.compile(r"\d+")


def log(msg: str) -> None:
    print(msg, flush=True)


class Tree:
    def __init__(self, label: str, path: Path, home_prefix: str, cwd: str):
        self.label, self.path, self.cwd = label, path.resolve(), cwd
        self.home = f"{home_prefix}-{label}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIMCLUSTER_"))}
        self.env.update(PYTHONPATH=str(self.path), SIMCLUSTER_HOME=self.home)
        self.up_names: List[str] = []

    def name(self, nodes: int) -> str:
        return f"cmp-{self.label}-{nodes}"

    def run(self, *args: str, timeout: float = 900) -> Tuple[float, subprocess.CompletedProcess]:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "provisioner", *args], env=self.env, cwd=self.cwd,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout)
        return time.monotonic() - t0, proc

    def check_import(self) -> str:
        out = subprocess.run([sys.executable, "-c", "import provisioner; print(provisioner.__file__)"],
                             env=self.env, cwd=self.cwd, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        if not out.startswith(str(self.path) + "/"):
            raise SystemExit(f"{self.label}: PYTHONPATH={self.path} imports {out}, not that tree")
        return out


def steps_of(stderr: str) -> Dict[str, float]:
    steps = {}
    for line in stderr.splitlines():
        m = STEP_LINE.match(line.rstrip())
        if m:
            steps[DIGITS.sub("N", m.group(1))] = float(m.group(2))
    return steps


def stats(xs: List[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"


def leftovers(home_prefix: str) -> List[str]:
    """Processes whose command line or environment names one of our SIMCLUSTER_HOMEs."""
    dirs = [f"{home_prefix}-{label}/".encode() for label in ("old", "new")]  # a cluster's directory
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if not zombie and any(d in cmd or b"SIMCLUSTER_STATE_DIR=" + d[:-1] in env for d in dirs):
            found.append(entry + " " + cmd.replace(b"\0", b" ").decode(errors="replace")[:100])
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="source tree of the old version (e.g. /tmp/base)")
    ap.add_argument("--new", required=True, help="source tree of the new version (e.g. /tmp/new or .)")
    ap.add_argument("--sizes", default="2,64,256", help="node counts [2,64,256]")
    ap.add_argument("--runs", default="2:5,64:5,256:3", help="runs per size, size:runs,... [2:5,64:5,256:3]; "
                    "sizes not named get 3")
    ap.add_argument("--home", default="/tmp/sc-cmp", help="SIMCLUSTER_HOME prefix (-old, -new appended)")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the trees first")
    ap.add_argument("--docker-runs", type=int, default=0, help="also time docker up of 2 nodes, N runs each [0]")
    ap.add_argument("--test-runs", type=int, default=0, help="also time test --suite basic, N runs each [0]")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    runs = {int(k): int(v) for k, v in (p.split(":") for p in args.runs.split(",") if p)}
    cwd = tempfile.mkdtemp(prefix="sc-cmp-cwd-")  # not a tree: `python -m` puts the cwd first on sys.path
    old, new = Tree("old", Path(args.old), args.home, cwd), Tree("new", Path(args.new), args.home, cwd)
    for t in (old, new):
        if not args.no_compile:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(t.path / "provisioner")], check=True)
        log(f"{t.label}: {t.check_import()}")
    log(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")

    times: Dict[Tuple[str, str, int], List[float]] = {}
    steps: Dict[Tuple[str, int], Dict[str, List[float]]] = {}
    try:
        for nodes in sizes:
            for i in range(runs.get(nodes, 3)):
                for t in ((old, new) if i % 2 == 0 else (new, old)):
                    name = t.name(nodes)
                    t.up_names.append(name)
                    up_s, up = t.run("up", "--name", name, "--nodes", str(nodes), "--wait", "300")
                    if up.returncode != 0:
                        raise SystemExit(f"{t.label} up {nodes} failed (exit {up.returncode}):\n{up.stderr}{up.stdout}")
                    down_s, down = t.run("down", "--name", name)
                    if down.returncode != 0:
                        raise SystemExit(f"{t.label} down {nodes} failed (exit {down.returncode}):\n{down.stderr}")
                    times.setdefault((t.label, "up", nodes), []).append(up_s)
                    times.setdefault((t.label, "down", nodes), []).append(down_s)
                    inside = INSIDE.search(up.stdout)
                    if inside:
                        times.setdefault((t.label, "up inside", nodes), []).append(float(inside.group(1)))
                    for step, s in steps_of(up.stderr).items():
                        steps.setdefault((t.label, nodes), {}).setdefault(step, []).append(s)
                    log(f"  {nodes:>3} nodes run {i + 1} {t.label}: up {up_s:.2f}s, down {down_s:.2f}s")
        extra = [("docker up", 2, args.docker_runs, ("up", "--backend", "docker", "--nodes", "2"), True),
                 ("test basic", 2, args.test_runs, ("test", "--nodes", "2", "--fake-gpus", "2", "--suite", "basic"),
                  False)]
        for what, nodes, count, argv, down_after in extra:
            if count and what == "docker up":
                for t in (old, new):  # the image and a first start, untimed
                    t.run("image", "build", timeout=1800)
                    t.up_names.append(f"cmp-{t.label}-d")
                    t.run(*argv, "--name", f"cmp-{t.label}-d")
                    t.run("down", "--name", f"cmp-{t.label}-d")
            for i in range(count):
                for t in ((old, new) if i % 2 == 0 else (new, old)):
                    name = f"cmp-{t.label}-{what.split()[0]}"
                    t.up_names.append(name)
                    took, res = t.run(*argv, "--name", name)
                    if res.returncode != 0:
                        raise SystemExit(f"{t.label} {what} failed (exit {res.returncode}):\n{res.stderr}{res.stdout}")
                    if down_after:
                        t.run("down", "--name", name)
                    times.setdefault((t.label, what, nodes), []).append(took)
                    log(f"  {what} run {i + 1} {t.label}: {took:.2f}s")
    finally:
        for t in (old, new):
            for name in dict.fromkeys(t.up_names):
                t.run("down", "--name", name)  # a no-op error when it is gone already
        left = leftovers(args.home)
        log("leftover processes: " + ("none" if not left else "\n  " + "\n  ".join(left)))

    log("\n| command | nodes | runs | old median (min-max) s | new median (min-max) s | new - old (medians) |")
    log("|---|---|---|---|---|---|")
    for what in ("up", "up inside", "down", "docker up", "test basic"):
        for nodes in sorted(set(sizes) | {2}):
            o, n = times.get(("old", what, nodes), []), times.get(("new", what, nodes), [])
            if o and n:
                diff = statistics.median(n) - statistics.median(o)
                log(f"| {what} | {nodes} | {len(o)} | {stats(o)} | {stats(n)} | {diff:+.2f} |")
    log("\nup's own per-step times, medians (s):")
    for nodes in sizes:
        for t in (old, new):
            row = steps.get((t.label, nodes), {})
            log(f"  {nodes:>3} {t.label}: " + "; ".join(f"{k} {statistics.median(v):.3f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
