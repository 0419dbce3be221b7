#!/usr/bin/env python3
"""Benchmark the docker backend: image build from nothing and cached, `up` to all-idle, and the floor.

Writes docs/benchmarks-docker.md. The from-nothing build uses its own tags
(simcluster/base:bench, simcluster/node:bench) so it never disturbs the images in use;
with --skip-from-nothing the image section of the existing page is kept as it is.

Every `up` figure stands beside its floor, measured in the same run on the same engine:
what the engine itself takes for the machines (a network and the controller's and nodes'
containers started at once, nothing in them), one docker exec round trip (each command
simcluster runs in a container is one), and the Python start of the CLI. The machine is
shared, so each run's 1-minute load average and the CPU time of the `simcluster` process
are printed beside it.
Usage: python scripts/bench_docker.py [--out docs/benchmarks-docker.md] [--repeat 3] [--skip-from-nothing]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.providers.docker.engine import client  # noqa: E402
from provisioner.providers.docker.image import DEFAULT_SLURM, bootstrap_base, build_image, default_image  # noqa: E402

# The target for a docker `up` of 2 nodes with a cached image.
TARGET_2 = 1.2
IMAGE_SECTION = "## Node image"


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def cli(args, home) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of the simcluster process) of one `simcluster ARGS`."""
    env = dict(os.environ, SIMCLUSTER_HOME=str(home))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "provisioner", *args], env=env, cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"simcluster {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def fmt(xs, spec="{:.2f}"):
    return " / ".join(spec.format(x) for x in (min(xs), statistics.median(xs), max(xs)))


def best_of(n: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(n))


def bare_machines(tag: str, nodes: int) -> float:
    """Seconds the engine takes for a cluster's machines alone: a network, then the
    controller's and ``nodes`` node containers created and started at once (as provision
    does: --init, a hostname, on that network), nothing run in them. Removed afterwards."""
    docker = client()
    name = f"scb-floor-{uuid.uuid4().hex[:6]}"
    made: List = []
    t0 = time.monotonic()
    net = docker.networks.create(name)
    try:
        def start(host: str):
            c = docker.containers.run(tag, name=f"{name}-{host}", hostname=host, network=name, detach=True,
                                      init=True)
            made.append(c)
        with ThreadPoolExecutor(max_workers=nodes + 1) as pool:
            list(pool.map(start, ["slurmctld", *(f"node{i + 1}" for i in range(nodes))]))
        took = time.monotonic() - t0
    finally:
        for c in made:
            c.remove(force=True)
        net.remove()
    return took


def exec_round_trip(tag: str, repeat: int) -> float:
    """Seconds of one docker exec of `true` in a running container (create, start, inspect:
    what the runner pays per command), best of ``repeat``."""
    docker = client()
    c = docker.containers.run(tag, name=f"scb-exec-{uuid.uuid4().hex[:6]}", detach=True, init=True)
    try:
        def one() -> float:
            t0 = time.monotonic()
            api = docker.api
            exec_id = api.exec_create(c.id, ["true"])["Id"]
            api.exec_start(exec_id)
            api.exec_inspect(exec_id)
            return time.monotonic() - t0
        one()  # the first exec in a container pays for warming the runtime
        return best_of(repeat, one)
    finally:
        c.remove(force=True)


def python_start(repeat: int) -> float:
    """Seconds of a Python that imports what every docker command needs (the CLI and the
    docker backend with its SDK), no engine asked."""
    return best_of(repeat, lambda: timed(lambda: subprocess.run(
        [sys.executable, "-c", "import provisioner.cli.main, provisioner.providers.docker"], cwd=REPO,
        stdout=subprocess.DEVNULL, check=True)))


def old_image_section(path: Path) -> List[str]:
    """The image section of the page as it is (kept when this run builds no image)."""
    if not path.exists():
        return []
    lines, keep = [], False
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            keep = line.startswith(IMAGE_SECTION)
        if keep:
            lines.append(line)
    return lines + ([""] if lines and lines[-1] else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks-docker.md"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nodes", default="2,8", help="node counts to time `up` at (comma-separated)")
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
    counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    tag = default_image(DEFAULT_SLURM)
    ups: Dict[int, Dict[str, list]] = {}
    floor: Dict[str, float] = {}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="scb-") as home:
        subprocess.run([sys.executable, "-m", "provisioner", "image", "build"], cwd=REPO, check=True,
                       env=dict(os.environ, SIMCLUSTER_HOME=home), stdout=subprocess.DEVNULL)
        print("bench: floor (python start, exec round trip, bare machines) ...", flush=True)
        floor["python"] = python_start(args.repeat)
        floor["exec"] = exec_round_trip(tag, max(5, args.repeat))
        for nodes in counts:
            floor[f"machines{nodes}"] = best_of(args.repeat, lambda: bare_machines(tag, nodes))
        for nodes in counts:
            ups[nodes] = {"up": [], "cpu": [], "down": [], "load": []}
            for i in range(args.repeat):
                name = f"bench{nodes}"
                wall, cpu = cli(["up", "--backend", "docker", "--name", name, "--nodes", str(nodes),
                                 "--fake-gpus", str(nodes)], home)
                ups[nodes]["up"].append(wall)
                ups[nodes]["cpu"].append(cpu)
                ups[nodes]["load"].append(os.getloadavg()[0])
                ups[nodes]["down"].append(cli(["down", "--name", name], home)[0])
                print(f"  {nodes} nodes run {i + 1}: up {wall:.2f}s (CPU {cpu:.2f}s, load {ups[nodes]['load'][-1]:.2f})"
                      f" down {ups[nodes]['down'][-1]:.2f}s", flush=True)
    cpu_model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), platform.processor())
    docker_v = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], stdout=subprocess.PIPE,
                              text=True).stdout.strip()
    out = Path(args.out)
    lines = ["# Docker backend benchmarks", "",
             f"Machine: {cpu_model}, {os.cpu_count()} cores, kernel {platform.release()}, docker {docker_v}; "
             f"{time.strftime('%Y-%m-%d')}; 1-minute load average at the start "
             f"{' '.join(f'{x:.2f}' for x in load_start)}. Reproduce: `python scripts/bench_docker.py`.",
             "Times are wall-clock seconds of the whole `simcluster` command.", ""]
    if rows:
        lines += [IMAGE_SECTION, "", "| what | seconds |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows] + [""]
    else:
        lines += old_image_section(out)
    lines += ["## `up --backend docker` to all-idle, cached image (min / median / max)", "",
              "Floor: what the engine takes for the same machines with nothing in them (a network and "
              "the controller's and nodes' containers started at once), plus the CLI's Python start (its imports, the docker SDK's included); "
              "the rest of `up` is simcluster's steps (each a docker exec of "
              f"{floor['exec'] * 1000:.0f} ms here, best of {max(5, args.repeat)}) and Slurm's own start.", "",
              "| nodes | up | CPU of simcluster | load (1 min) | floor: machines + Python | down | target (up) |",
              "|---|---|---|---|---|---|---|"]
    for nodes, r in ups.items():
        machines = floor[f"machines{nodes}"]
        target, verdict = "-", ""
        if nodes == 2:
            target = f"≤ {TARGET_2} s"
            verdict = " PASS" if min(r["up"]) <= TARGET_2 else " MISS"
        lines.append(f"| {nodes} | {fmt(r['up'])} | {fmt(r['cpu'])} | {fmt(r['load'])} | "
                     f"{machines:.2f} + {floor['python']:.2f} = {machines + floor['python']:.2f} | {fmt(r['down'])} | "
                     f"{target}{verdict} |")
    lines += ["", "Where the time of a 2-node `up` goes, and what was cut: see "
              "[docker.md](docker.md#how-fast-up-is). `simcluster verify` on a docker cluster: see "
              "[benchmarks-verify.md](benchmarks-verify.md)."]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
