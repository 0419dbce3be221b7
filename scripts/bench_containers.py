#!/usr/bin/env python3
"""Benchmark container steps (pyxis's --container-image), write docs/benchmarks-containers.md.

  import      `simcluster image import dockerd://IMAGE -o F.sqsh` per image
  first step  `srun -N N --ntasks-per-node=1 --container-image=F.sqsh true`, the cluster's
              first: the image is unpacked once for the cluster, then each node mounts its
              overlay (a new cluster per node count, so every first step unpacks)
  warm step   the same srun again (the image is unpacked: only the overlay mounts)
  no container  `srun -N N --ntasks-per-node=1 true`, for comparison

Local backend, as root, with the container plugin built (`make setup-containers`).
Usage: python scripts/bench_containers.py [--out docs/benchmarks-containers.md]
       [--images dockerd://simcluster/base:bookworm,...] [--nodes 2,8,32] [--repeat 5]
Clusters live under SIMCLUSTER_HOME=/tmp/sc-bench-containers and are torn down at the end.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from benchlib import Simcluster

HOME = "/tmp/sc-bench-containers"
SC = Simcluster(HOME)
cli, slurm_env = SC.cli, SC.slurm_env


def timed(argv: List[str], env: Dict[str, str]) -> float:
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return took


def fmt(xs: List[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}, {max(xs):.2f}, {len(xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--images", default="dockerd://simcluster/base:bookworm,dockerd://simcluster/node:0.1.0-train")
    ap.add_argument("--nodes", default="2,8,32")
    ap.add_argument("--repeat", type=int, default=5, help="warm steps per node count")
    ap.add_argument("--note", default="", help="a line printed under the tables (e.g. what else ran meanwhile)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: container steps need the local backend as root")
    sizes = [int(n) for n in a.nodes.split(",")]
    rows_import, rows_steps = [], []
    with tempfile.TemporaryDirectory(prefix="sc-bench-containers-") as tmp:
        for image in a.images.split(","):
            sqsh = Path(tmp) / (image.split("://", 1)[-1].replace("/", "_").replace(":", "_") + ".sqsh")
            t0 = time.monotonic()
            cli("image", "import", image, "-o", str(sqsh))
            took = time.monotonic() - t0
            rows_import.append([image, f"{took:.1f}", f"{sqsh.stat().st_size / 2**20:.0f} MiB"])
            print(f"import {image}: {took:.1f}s", file=sys.stderr)
            for n in sizes:
                name = f"bc{n}"
                cli("up", "--name", name, "--nodes", str(n), "--cpus", "1", timeout=600)
                try:
                    env = slurm_env(name)
                    step = ["srun", "-N", str(n), "--ntasks-per-node=1"]
                    cont = step + [f"--container-image={sqsh}", "true"]
                    first = timed(cont, env)
                    warm = [timed(cont, env) for _ in range(a.repeat)]
                    plain = [timed(step + ["true"], env) for _ in range(a.repeat)]
                finally:
                    cli("down", "--name", name)
                rows_steps.append([image, str(n), f"{first:.2f}", fmt(warm), fmt(plain)])
                print(f"{image} {n} nodes: first {first:.2f}s, warm {fmt(warm)}, plain {fmt(plain)}", file=sys.stderr)
    t1 = ("| image | `image import` (s) | .sqsh |\n|---|---|---|\n"
          + "\n".join(f"| {' | '.join(r)} |" for r in rows_import))
    t2 = ("| image | nodes | first container step (s: unpack + mount) | warm container step (s: median (min, max, n)) "
          "| step without a container (s) |\n|---|---|---|---|---|\n"
          + "\n".join(f"| {' | '.join(r)} |" for r in rows_steps))
    print(t1 + "\n\n" + t2)
    if a.out:
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        load = os.getloadavg()[0]
        text = (f"# Benchmarks: container steps\n\n"
                f"`python scripts/bench_containers.py --out {a.out}` (`make bench-containers`), {when}, "
                f"{os.cpu_count()} cores, load average {load:.2f} at the end; wall clock of each command as a user "
                f"sees it; local backend, as root ([containers.md](containers.md)).\n\n"
                f"{t1}\n\n{t2}\n\n{a.note}\n")
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
