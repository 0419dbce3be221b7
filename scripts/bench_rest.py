#!/usr/bin/env python3
"""Benchmark slurmrestd: requests per second for job submission and job listing over REST.

Brings up a 2-node local cluster with --rest (SIMCLUSTER_HOME=/tmp/sc-bench-rest), then,
with THREADS client threads (plain urllib, as verify's rest.api), for SECONDS each:
  submit   POST /slurm/VERSION/job/submit of a one-task `true` job (held: --hold, so the
           scheduler's work is left out; they are cancelled afterwards)
  list     GET /slurm/VERSION/jobs with LISTED (100) held jobs in the queue
and prints a markdown table (the numbers in docs/rest.md come from it). The cluster is
torn down at the end.

Usage: python scripts/bench_rest.py [--seconds S] [--threads T] [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HOME = "/tmp/sc-bench-rest"
os.environ["SIMCLUSTER_HOME"] = HOME
NAME = "bench-rest"
LISTED = 100  # jobs in the queue while listing is timed

from provisioner.cluster.services import rest  # noqa: E402
from provisioner.named_clusters import load  # noqa: E402
from provisioner.verify.rest import job_request, token_user  # noqa: E402


def cli(*args: str) -> str:
    p = subprocess.run([str(REPO / ".venv" / "bin" / "simcluster"), *args], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"simcluster {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def hammer(seconds: float, threads: int, one) -> tuple:
    """Call ``one()`` from ``threads`` threads for ``seconds``; (requests, errors, elapsed)."""
    counts, errors = [0] * threads, [0] * threads
    end = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < end:
            try:
                one()
                counts[i] += 1
            except Exception:
                errors[i] += 1
    t0 = time.monotonic()
    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts), sum(errors), time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = ap.parse_args()
    cli("up", "--name", NAME, "--nodes", "2", "--rest", "--recreate")
    try:
        cluster = load(NAME)
        url, tok = cluster.state.rest_url, rest.token(cluster, lifespan=3600)
        user = token_user(tok)
        version = rest.newest(rest.versions(url, user, tok))
        doc = rest.request(url, "/openapi/v3", user, tok)
        body = job_request(doc, version, "#!/bin/sh\ntrue\n", 1, "/tmp", {"PATH": "/usr/bin:/bin"})
        body["job"]["hold"] = True
        body["job"]["name"] = "bench-rest"
        rows = []
        n, err, took = hammer(args.seconds, args.threads,
                              lambda: rest.request(url, f"/slurm/{version}/job/submit", user, tok, body))
        rows.append(("job submission (POST .../job/submit, held 1-task job)", n, err, took))
        # Listing is timed with a queue of LISTED jobs: its cost grows with the queue (5000+
        # held jobs make one answer of several MB), which is not what a dashboard polls.
        cluster.client.run(["scancel", "--name", "bench-rest"], timeout=120)
        for _ in range(LISTED):
            rest.request(url, f"/slurm/{version}/job/submit", user, tok, body)
        queued = LISTED
        n, err, took = hammer(args.seconds, args.threads, lambda: rest.request(url, f"/slurm/{version}/jobs", user, tok))
        rows.append((f"job listing (GET .../jobs, {queued} jobs queued)", n, err, took))
        cluster.client.run(["scancel", "--name", "bench-rest"], timeout=60)
        print(f"slurmrestd {version}, Slurm {cluster.client.version().split()[-1]}, {os.cpu_count()} cores, "
              f"{args.threads} client threads, {args.seconds:g} s each, {datetime.date.today()}\n")
        print("| requests | done | errors | per second |\n|---|---|---|---|")
        for what, n, err, took in rows:
            print(f"| {what} | {n} | {err} | {n / took:.0f} |")
    finally:
        if not args.keep:
            cli("down", "--name", NAME)


if __name__ == "__main__":
    main()
