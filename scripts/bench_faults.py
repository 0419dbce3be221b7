#!/usr/bin/env python3
"""Benchmark repair, stop/start and failure detection, write docs/benchmarks-faults.md.

  repair (local)     `simcluster up` on a cluster with 1 dead slurmd, a dead slurmctld,
                     every slurmd of a 256-node cluster dead (SIGKILL by pid from the state)
  stop/start         `simcluster stop` and `simcluster start` of 2 and 64 local nodes, 2 docker nodes
  detection          `simcluster fault kill node2` -> sinfo shows node2 `*` (not responding)
                     and DOWN, with and without --fast-failure (a 1-node job runs on node2)

Usage: python scripts/bench_faults.py [--out docs/benchmarks-faults.md] [--only repair,stopstart,detect]
       [--repeat N] [--no-docker] [--normal-limit S]
Clusters live under SIMCLUSTER_HOME=/tmp/sc-bench-faults and are torn down at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from benchlib import Simcluster

HOME = "/tmp/sc-bench-faults"
SC = Simcluster(HOME)
cli, slurm_env = SC.cli, SC.slurm_env


def timed(*args: str, timeout: float = 900) -> float:
    t0 = time.monotonic()
    cli(*args, timeout=timeout)
    return time.monotonic() - t0


def state(name: str) -> Dict:
    return json.loads((Path(HOME) / name / "state.json").read_text())


def kill(pids: List[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_dead(pids: List[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)


def fmt(xs: List[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):.2f} (min {min(xs):.2f}, max {max(xs):.2f}, n={len(xs)})"


# -- repair ---------------------------------------------------------------------------------------
def bench_repair(repeat: int) -> List[List[str]]:
    rows = []
    for nodes, what in ((4, "1 dead slurmd"), (4, "dead slurmctld"), (256, "256 dead slurmd")):
        name = f"rep{nodes}"
        up = ["up", "--name", name, "--nodes", str(nodes)]
        cli(*up, "--recreate")
        times = []
        try:
            for _ in range(repeat):
                pids = state(name)["pids"]
                if what == "1 dead slurmd":
                    victims = [pids["slurmd:node2"]]
                elif what == "dead slurmctld":
                    victims = [pids["slurmctld"]]
                else:
                    victims = [v for k, v in pids.items() if k.startswith("slurmd:")]
                kill(victims)
                wait_dead(victims)
                times.append(timed(*up))
        finally:
            cli("down", "--name", name, check=False)
        rows.append([f"`up` repairs {what}", f"local, {nodes} nodes", fmt(times)])
        print(rows[-1], flush=True)
    return rows


# -- stop/start -----------------------------------------------------------------------------------
def bench_stopstart(repeat: int, docker: bool) -> List[List[str]]:
    rows = []
    cases = [("local", 2), ("local", 64)] + ([("docker", 2)] if docker else [])
    for backend, nodes in cases:
        name = f"ss-{backend}-{nodes}"
        cli("up", "--name", name, "--nodes", str(nodes), "--backend", backend, "--recreate", timeout=1200)
        stops, starts = [], []
        try:
            for _ in range(repeat):
                stops.append(timed("stop", "--name", name))
                starts.append(timed("start", "--name", name, timeout=1200))
        finally:
            cli("down", "--name", name, check=False, timeout=600)
        rows.append(["`stop`", f"{backend}, {nodes} nodes", fmt(stops)])
        rows.append(["`start` (until every node is idle)", f"{backend}, {nodes} nodes", fmt(starts)])
        print(rows[-2:], flush=True)
    return rows


# -- detection ------------------------------------------------------------------------------------
def node_state(env: Dict[str, str], node: str) -> str:
    p = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, env=env, timeout=15)
    return p.stdout.strip().lower()


def detect_once(name: str, limit: float) -> Dict[str, Optional[float]]:
    env = slurm_env(name)
    job = subprocess.run(["sbatch", "--parsable", "-w", "node2", "-N1", "-o", "/dev/null", "--wrap", "sleep 600"],
                         capture_output=True, text=True, env=env).stdout.strip()
    deadline = time.monotonic() + 30
    while "alloc" not in node_state(env, "node2") and "mix" not in node_state(env, "node2"):
        if time.monotonic() > deadline:
            raise RuntimeError("the job never ran on node2")
        time.sleep(0.2)
    time.sleep(2)
    t0 = time.monotonic()
    cli("fault", "kill", "node2", "--name", name)
    star = down = None
    while time.monotonic() - t0 < limit:
        s = node_state(env, "node2")
        if star is None and s.endswith("*"):
            star = time.monotonic() - t0
        if s.startswith("down"):
            down = time.monotonic() - t0
            break
        time.sleep(0.2)
    subprocess.run(["scancel", job], env=env, capture_output=True)
    cli("fault", "heal", "--name", name)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and node_state(env, "node2") not in ("idle", "mixed", "allocated"):
        time.sleep(0.3)
    return {"star": star, "down": down}


def bench_detect(repeat: int, normal_limit: float) -> List[List[str]]:
    rows = []
    for mode, args, limit, n in (("--fast-failure", ["--fast-failure"], 60.0, repeat),
                                 ("default", [], normal_limit, 1)):
        name = "det-fast" if args else "det-normal"
        cli("up", "--name", name, "--nodes", "3", *args, "--recreate")
        conf = (Path(HOME) / name / "etc" / "slurm.conf").read_text()
        def conf_value(key: str) -> str:
            return next((line.split("=", 1)[1] for line in conf.splitlines() if line.startswith(key + "=")), "?")
        timeout = f"{conf_value('SlurmdTimeout')}, MessageTimeout={conf_value('MessageTimeout')}"
        stars, downs, missed = [], [], 0
        try:
            for _ in range(n):
                r = detect_once(name, limit)
                if r["star"] is not None:
                    stars.append(r["star"])
                if r["down"] is not None:
                    downs.append(r["down"])
                else:
                    missed += 1
                print(mode, r, flush=True)
        finally:
            cli("down", "--name", name, check=False)
        down_text = fmt(downs) + (f"; {missed} not DOWN within {limit:.0f} s" if missed else "")
        rows.append(["`fault kill node2` -> node2 not responding (`*`)", f"local, 3 nodes, {mode} "
                     f"(SlurmdTimeout={timeout})", fmt(stars)])
        rows.append(["`fault kill node2` -> node2 DOWN", f"local, 3 nodes, {mode} (SlurmdTimeout={timeout})",
                     down_text])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="repair,stopstart,detect")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--normal-limit", type=float, default=150.0, help="seconds to wait for DOWN without --fast-failure")
    ap.add_argument("--note", default="", help="a line printed under the table (e.g. what else ran meanwhile)")
    a = ap.parse_args()
    only = a.only.split(",")
    rows: List[List[str]] = []
    if "detect" in only:
        rows += bench_detect(a.repeat, a.normal_limit)
    if "repair" in only:
        rows += bench_repair(a.repeat)
    if "stopstart" in only:
        rows += bench_stopstart(a.repeat, not a.no_docker)
    table = "| what | cluster | seconds: median (min, max, n) |\n|---|---|---|\n" + \
        "\n".join(f"| {' | '.join(r)} |" for r in rows)
    print(table)
    if a.out:
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        text = (f"# Benchmarks: repair, stop/start, failure detection\n\n"
                f"`python scripts/bench_faults.py --out {a.out}` (`make bench-faults`), {when}, "
                f"{os.cpu_count()} cores; wall clock of the whole command as a user sees it.\n\n"
                f"{table}\n\n{a.note}\n")
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
