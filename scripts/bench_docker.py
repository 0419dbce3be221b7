#!/usr/bin/env python3
"""Benchmark the docker backend: image build from nothing and cached, `up` to all-idle.

Writes docs/benchmarks-docker.md. The from-nothing build uses its own tags
(simcluster/base:bench, simcluster/node:bench) so it never disturbs the images in use.
Usage: python scripts/bench_docker.py [--out docs/benchmarks-docker.md] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.providers.docker.image import bootstrap_base, build_image, image_tag  # noqa: E402


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def cli(args, home):
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)


def fmt(xs):
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks-docker.md"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-from-nothing", action="store_true")
    args = ap.parse_args()
    quiet = lambda m: None  # noqa: E731
    rows = []
    if not args.skip_from_nothing:
        print("bench: base bootstrap (debootstrap + import) ...", flush=True)
        t_base = timed(lambda: bootstrap_base(quiet, tag="simcluster/base:bench"))
        print(f"  {t_base:.1f}s; image build --no-cache ...", flush=True)
        t_build = timed(lambda: build_image(quiet, base="simcluster/base:bench", tag="simcluster/node:bench",
                                            no_cache=True))
        t_cached = [timed(lambda: build_image(quiet, base="simcluster/base:bench", tag="simcluster/node:bench"))
                    for _ in range(args.repeat)]
        print("  training image build --no-cache ...", flush=True)
        t_train = timed(lambda: build_image(quiet, train=True, base="simcluster/base:bench",
                                            tag="simcluster/node:bench-train", no_cache=True))
        t_train_cached = [timed(lambda: build_image(quiet, train=True, base="simcluster/base:bench",
                                                    tag="simcluster/node:bench-train")) for _ in range(args.repeat)]
        subprocess.run(["docker", "rmi", "simcluster/node:bench", "simcluster/node:bench-train",
                        "simcluster/base:bench"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows += [("offline base (debootstrap + docker import)", f"{t_base:.1f}"),
                 ("node image build, no cache", f"{t_build:.1f}"),
                 ("from nothing, total", f"{t_base + t_build:.1f}"),
                 ("rebuild, nothing changed (min / median / max)", fmt(t_cached)),
                 ("training image (`--train`) build, no cache, on that base (wheels already collected on the host)",
                  f"{t_train:.1f}"),
                 ("training image rebuild, nothing changed (min / median / max)", fmt(t_train_cached))]
    ups = {}
    with tempfile.TemporaryDirectory(prefix="scb-") as home:
        cli(["image", "build"], home)
        for nodes in (2, 8):
            ups[nodes] = {"up": [], "down": []}
            for i in range(args.repeat):
                name = f"bench{nodes}"
                ups[nodes]["up"].append(timed(lambda: cli(["up", "--backend", "docker", "--name", name,
                                                           "--nodes", str(nodes), "--fake-gpus", str(nodes)], home)))
                ups[nodes]["down"].append(timed(lambda: cli(["down", "--name", name], home)))
                print(f"  {nodes} nodes run {i + 1}: up {ups[nodes]['up'][-1]:.2f}s "
                      f"down {ups[nodes]['down'][-1]:.2f}s", flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    docker_v = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                              text=True).stdout.strip()
    lines = ["# Docker backend benchmarks", "",
             f"Machine: {cpu}, {os.cpu_count()} cores, kernel {platform.release()}, docker {docker_v}; "
             f"{time.strftime('%Y-%m-%d')}. Reproduce: `python scripts/bench_docker.py`.",
             "Times are wall-clock seconds of the whole `simcluster` command.", ""]
    if rows:
        lines += ["## Node image", "", "| what | seconds |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]
    lines += ["## `up --backend docker` to all-idle, cached image (min / median / max)", "",
              "| nodes | up | down | target (up) |", "|---|---|---|---|"]
    for nodes, r in ups.items():
        target = "≤ 10 s" if nodes == 2 else "-"
        verdict = (" PASS" if statistics.median(r["up"]) <= 10 else " MISS") if nodes == 2 else ""
        lines.append(f"| {nodes} | {fmt(r['up'])} | {fmt(r['down'])} | {target}{verdict} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
