#!/usr/bin/env python3
"""Benchmark `simcluster scale` on a running cluster; print a Markdown table for docs/scale.md.

  local +2    `scale --add 2` on a running 2-node local cluster, a job running on it
  local +64   `scale --add 64` on a running 2-node local cluster
  docker +2   the same on a docker cluster (the docker rows are skipped when no engine answers)
  docker +64  `scale --add 64` on a running 2-node docker cluster

Each is timed as the command's wall clock (until the new nodes are idle), median of --repeat
runs, a fresh cluster each. Clusters live under SIMCLUSTER_HOME=/tmp/sc-bench-scale.
Usage: python scripts/bench_scale.py [--repeat 3] [--no-docker] [--only local|docker]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import List

from benchlib import Simcluster

HOME = "/tmp/sc-bench-scale"
SC = Simcluster(HOME)
cli = SC.cli


def one(backend: str, add: int) -> float:
    """Seconds `scale --add ADD` takes on a fresh running 2-node cluster with a job running."""
    name = f"bsc-{backend[:2]}{add}"
    cli("up", "--name", name, "--nodes", "2", "--backend", backend)
    try:
        cli("exec", "--name", name, "--", "sbatch", "-N2", "-o", "/dev/null", "--wrap", "sleep 60")
        t0 = time.monotonic()
        cli("scale", "--name", name, "--add", str(add))
        took = time.monotonic() - t0
        out = cli("exec", "--name", name, "--", "sinfo", "-h", "-o", "%D %t").stdout
        idle = sum(int(line.split()[0]) for line in out.splitlines() if line.split()[1] == "idle")
        if idle < add:
            raise RuntimeError(f"only {idle} idle nodes after scale --add {add}:\n{out}")
        return took
    finally:
        cli("down", "--name", name)


def engine_answers() -> bool:
    """Does a docker engine answer (the docker row needs one)?"""
    try:
        return subprocess.run(["docker", "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--only", choices=["local", "docker"], help="time one backend's rows only")
    args = ap.parse_args()
    cases = [("local", 2), ("local", 64), ("docker", 2), ("docker", 64)]
    if args.no_docker or not engine_answers():
        cases = [c for c in cases if c[0] != "docker"]
    cases = [c for c in cases if args.only in (None, c[0])]
    rows: List[str] = []
    for backend, add in cases:
        times = [one(backend, add) for _ in range(args.repeat)]
        rows.append(f"| {backend}, 2 running nodes, `scale --add {add}` | {statistics.median(times):.2f} s "
                    f"(min {min(times):.2f}, max {max(times):.2f}, {len(times)} runs) |")
        print(rows[-1], flush=True)
    print("\n| what | wall clock, until the new nodes are idle |\n|---|---|\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
