#!/usr/bin/env python3
"""Soak test: random faults against a stream of small jobs, then count what was lost.

    make soak                      # 30 minutes, writes docs/reliability.md
    .venv/bin/python scripts/soak.py --minutes 5 --out /tmp/reliability.md

A --fast-failure, --accounting local cluster (4 nodes) receives a stream of small
`sbatch --requeue` jobs (1-node, 2-node with srun, and arrays). Every 20-60 s one random
fault from `simcluster fault` (kill, pause, kill-controller, stop-accounting, drain) is
injected, held a few seconds, then undone with `simcluster fault heal` (pause: `fault
resume`); the time until every node is schedulable again is measured. At the end the
queue must drain, and every submitted job (each array task) must have reached COMPLETED
(sacct, squeue) and written its marker file; a job that did not is *lost*.

A node whose slurmd is alive but does not answer slurmctld (status: "slurmd alive but not
answering") is counted as a hang, and the tail of its slurmd log is kept in the run dir.
Not part of `make test`/CI: it takes --minutes plus the drain.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set

REPO = Path(__file__).resolve().parents[1]
SIMCLUSTER = str(REPO / ".venv" / "bin" / "simcluster")
FAULTS = ("kill", "pause", "kill-controller", "stop-accounting", "drain")
BAD = ("down", "drain", "fail", "unknown", "not_responding", "future", "*")


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


class Soak:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.name = args.name
        self.run_dir = Path(args.run_dir or f"/tmp/soak-{int(time.time())}").resolve()
        (self.run_dir / "done").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "out").mkdir(exist_ok=True)
        self.env = dict(os.environ)
        self.submitted: List[Dict] = []  # {id, kind, tasks: [ids], t}
        self.refused = 0  # sbatch refused (controller down): never got an id, not a job
        self.faults: List[Dict] = []
        self.hangs: List[Dict] = []
        self.last_state: Dict[str, str] = {}
        self.stop = threading.Event()
        self.quiet = threading.Event()
        self.sacct_names: Dict[str, str] = {}
        self.lock = threading.Lock()

    # -- helpers ------------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([SIMCLUSTER, *args, "--name", self.name], capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def slurm(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.slurm_env)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(list(args), 124, "", "timed out")

    def node_states(self) -> Optional[Dict[str, str]]:
        p = self.slurm("sinfo", "-N", "-h", "-o", "%N %T", timeout=15)
        if p.returncode != 0:
            return None
        out = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1].lower()
        return out

    def all_schedulable(self) -> bool:
        states = self.node_states()
        return bool(states) and len(states) == self.a.nodes and not any(
            b in s for s in states.values() for b in BAD)

    # -- setup ----------------------------------------------------------------------------
    def up(self) -> None:
        log(f"up: {self.name}, {self.a.nodes} nodes, --fast-failure --accounting; run dir {self.run_dir}")
        p = self.cli("up", "--nodes", str(self.a.nodes), "--fast-failure", "--accounting", "--recreate",
                     timeout=600)
        if p.returncode != 0:
            sys.exit(f"up failed:\n{p.stdout}\n{p.stderr}")
        env = self.cli("env").stdout
        self.slurm_env = dict(os.environ)
        for line in env.splitlines():
            if line.startswith("export "):
                key, _, value = line[len("export "):].partition("=")
                self.slurm_env[key] = shlex.split(value)[0] if value else ""

    # -- the job stream -------------------------------------------------------------------
    def submit_one(self) -> None:
        d = self.run_dir
        kind = self.rng.choices(["single", "pair", "array"], weights=[5, 2, 2])[0]
        secs = self.rng.randint(1, 6)
        marker = f"{d}/done/$SLURM_JOB_ID"
        seq = len(self.submitted) + self.refused
        jname = f"soak-{kind}-{seq}"  # unique: a job id given twice shows up as a name mismatch
        args = ["sbatch", "--parsable", "--requeue", "-t", "10", "-J", jname]
        if kind == "single":
            args += ["-N1", "-o", f"{d}/out/%j.out", "--wrap", f"sleep {secs}; touch {marker}"]
        elif kind == "pair":
            args += ["-N2", "-o", f"{d}/out/%j.out", "--wrap", f"srun -N2 sleep {secs} && touch {marker}"]
        else:
            n = self.rng.randint(2, 5)
            args += [f"--array=0-{n - 1}", "-N1", "-o", f"{d}/out/%A_%a.out", "--wrap",
                     f"sleep {secs}; touch {d}/done/${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"]
        p = self.slurm(*args, timeout=30)
        if p.returncode != 0:
            with self.lock:
                self.refused += 1
            return
        job = p.stdout.strip().split(";")[0]
        tasks = [f"{job}_{i}" for i in range(n)] if kind == "array" else [job]
        with self.lock:
            self.submitted.append({"id": job, "kind": kind, "tasks": tasks, "t": time.time(), "name": jname})

    def submitter(self) -> None:
        while not self.stop.is_set():
            if self.quiet.is_set():  # see inject(): no submission just before kill-controller
                self.stop.wait(0.2)
                continue
            try:
                self.submit_one()
            except Exception as exc:  # keep streaming: a refused submission is counted, not fatal
                log(f"submit error: {exc!r}")
            self.stop.wait(self.rng.uniform(2, 6))

    def watcher(self) -> None:
        """Remember every job's last state squeue showed (jobs leave squeue MinJobAge after they end)."""
        while not self.stop.is_set():
            p = self.slurm("squeue", "-h", "--array", "--states=all", "-o", "%i|%T", timeout=15)
            if p.returncode == 0:
                with self.lock:
                    for line in p.stdout.splitlines():
                        jid, _, st = line.partition("|")
                        self.last_state[jid.strip()] = st.strip()
            self.stop.wait(2)

    # -- faults ---------------------------------------------------------------------------
    def hung_now(self) -> Dict[str, Dict]:
        p = self.cli("status", "--json", timeout=120)
        try:
            st = json.loads(p.stdout)
        except ValueError:
            return {}
        return {n["name"]: dict(n, state_dir=st["state_dir"]) for n in st.get("nodes", [])
                if "alive but not answering" in (n.get("problem") or "")}

    def check_hangs(self, when: str) -> None:
        """A slurmd alive but not answering, twice 8 s apart (slurmctld flags a slow or just
        resumed slurmd '*' until its next ping: one snapshot is not a hang)."""
        first = self.hung_now()
        if not first:
            return
        time.sleep(8)
        for n in self.hung_now().values():
            if n["name"] not in first:
                continue
            logf = Path(n["state_dir"]) / "log" / f"slurmd-{n['name']}.log"
            tail = ""
            try:
                tail = "\n".join(logf.read_text(errors="replace").splitlines()[-40:])
            except OSError:
                pass
            (self.run_dir / f"hang-{n['name']}-{int(time.time())}.log").write_text(tail)
            self.hangs.append({"node": n["name"], "when": when, "t": time.time()})
            log(f"HANG: {n['name']} slurmd alive but not answering ({when})")

    def inject(self) -> None:
        what = self.rng.choice(FAULTS)
        node = f"node{self.rng.randint(1, self.a.nodes)}"
        args = {"kill": ["kill", node], "pause": ["pause", node], "kill-controller": ["kill-controller"],
                "stop-accounting": ["stop-accounting"], "drain": ["drain", node, "--reason", "soak"]}[what]
        if what == "kill-controller":
            # slurmctld writes its job state at most every 5 s (SAVE_MAX_WAIT, compiled in):
            # a job submitted in those seconds dies with a SIGKILLed controller and its id is
            # given again to the next submission. Submissions pause 6 s before the kill (the
            # jobs already queued or running are what the fault is about).
            self.quiet.set()
            time.sleep(6)
        t0 = time.time()
        p = self.cli("fault", *args, timeout=120)
        self.quiet.clear()
        rec = {"what": what, "node": node if what in ("kill", "pause", "drain") else "", "t": t0,
               "inject_ok": p.returncode == 0, "inject_msg": (p.stdout + p.stderr).strip()[:200]}
        log(f"fault {' '.join(args)}: rc={p.returncode} {rec['inject_msg']}")
        time.sleep(self.rng.uniform(3, 8))
        h0 = time.time()
        if what == "pause":
            self.cli("fault", "resume", node, timeout=120)
        p = self.cli("fault", "heal", timeout=600)
        rec["heal_ok"] = p.returncode == 0
        rec["heal_msg"] = (p.stdout + p.stderr).strip()[:300]
        rec["heal_s"] = round(time.time() - h0, 2)
        deadline = time.time() + self.a.recover_timeout
        while time.time() < deadline and not self.all_schedulable():
            time.sleep(0.5)
        ok = self.all_schedulable()
        rec["recover_s"] = round(time.time() - h0, 2) if ok else None
        log(f"heal rc={p.returncode} in {rec['heal_s']}s: {rec['heal_msg'][:150]}; "
            f"{'recovered in %.1fs' % rec['recover_s'] if ok else 'NOT recovered: %s' % self.node_states()}")
        if not ok:
            self.check_hangs(f"not recovered after {what}")
            p = self.cli("fault", "heal", timeout=600)
            rec["second_heal"] = (p.stdout + p.stderr).strip()[:300]
            while time.time() < deadline + 120 and not self.all_schedulable():
                time.sleep(1)
            rec["recover_s_after_second_heal"] = round(time.time() - h0, 2) if self.all_schedulable() else None
        self.faults.append(rec)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> int:
        self.up()
        t_start = time.time()
        threads = [threading.Thread(target=self.submitter, daemon=True),
                   threading.Thread(target=self.watcher, daemon=True)]
        for t in threads:
            t.start()
        end = t_start + self.a.minutes * 60
        next_hang_check = time.time() + 60
        while time.time() < end:
            wait = self.rng.uniform(20, 60)
            time.sleep(max(0.0, min(wait, end - time.time())))
            if time.time() >= end:
                break
            self.inject()
            if time.time() >= next_hang_check:
                self.check_hangs("periodic")
                next_hang_check = time.time() + 60
        self.stop.set()
        for t in threads:
            t.join(timeout=60)
        log(f"fault stream over after {(time.time() - t_start) / 60:.1f} min; healing and draining the queue")
        self.cli("fault", "heal", timeout=600)
        t_drain = time.time()
        while time.time() < t_drain + self.a.drain_timeout:
            p = self.slurm("squeue", "-h", "-o", "%i %T", timeout=15)
            if p.returncode == 0 and not p.stdout.strip():
                break
            time.sleep(3)
        drain_s = time.time() - t_drain
        self.check_hangs("end")
        return self.report(time.time() - t_start, drain_s)

    def final_states(self) -> Dict[str, str]:
        """Each job/task id -> its state: sacct (last run of each), then squeue for what sacct lacks."""
        ids = ",".join(j["id"] for j in self.submitted)
        states: Dict[str, str] = {}
        for _ in range(40):  # sacct may trail the queue by a few seconds after an outage
            p = self.slurm("sacct", "-X", "-n", "-P", "-o", "JobID,JobName,State", "-S", "2000-01-01", "-j", ids,
                           timeout=60)
            states = {}
            for line in p.stdout.splitlines():
                jid, _, rest = line.partition("|")
                name, _, st = rest.partition("|")
                states[jid.strip()] = st.split()[0] if st else ""
                self.sacct_names[jid.strip()] = name
            # Until a job's start record reaches slurmdbd, sacct shows a placeholder row
            # named "allocation" for it (seen for the last job of a run): wait for the name.
            if all(states.get(t) == "COMPLETED" and self.sacct_names.get(t) == j["name"]
                   for j in self.submitted for t in j["tasks"]):
                break
            time.sleep(3)
        return states

    def report(self, total_s: float, drain_s: float) -> int:
        sacct = self.final_states()
        done_markers: Set[str] = {p.name for p in (self.run_dir / "done").iterdir()}
        p = self.slurm("squeue", "-h", "--array", "--states=all", "-o", "%i|%T", timeout=15)
        squeue = dict(line.split("|", 1) for line in p.stdout.splitlines() if "|" in line)
        tasks = [(j, t) for j in self.submitted for t in j["tasks"]]
        completed, lost, no_sacct = [], [], []
        for j, t in tasks:
            if self.sacct_names.get(t, j["name"]) not in (j["name"], "allocation"):  # id given to another job
                lost.append({"task": t, "why": f"id reused by job {self.sacct_names[t]}", "sacct": sacct.get(t)})
                continue
            st = sacct.get(t) or squeue.get(t) or self.last_state.get(t, "")
            if st == "COMPLETED" or squeue.get(t) == "COMPLETED":
                completed.append(t)
                if sacct.get(t) != "COMPLETED":
                    no_sacct.append(t)
            elif t in done_markers and sacct.get(t) is None:
                completed.append(t)  # ran to the end (marker), but neither sacct nor squeue keep it now
                no_sacct.append(t)
            else:
                lost.append({"task": t, "sacct": sacct.get(t), "squeue": squeue.get(t),
                             "last_seen": self.last_state.get(t), "marker": t in done_markers,
                             "submitted": datetime.datetime.fromtimestamp(j["t"]).strftime("%H:%M:%S")})
        recov = [f["recover_s"] for f in self.faults if f.get("recover_s") is not None]
        by_kind: Dict[str, List[float]] = {}
        for f in self.faults:
            if f.get("recover_s") is not None:
                by_kind.setdefault(f["what"], []).append(f["recover_s"])
        summary = {
            "minutes": round(total_s / 60, 1), "drain_s": round(drain_s, 1),
            "jobs_submitted": len(self.submitted), "tasks_submitted": len(tasks),
            "arrays": sum(1 for j in self.submitted if j["kind"] == "array"),
            "completed": len(completed), "lost": len(lost), "completed_not_in_sacct": len(no_sacct),
            "sbatch_refused": self.refused, "faults": len(self.faults),
            "faults_by_kind": {k: sum(1 for f in self.faults if f["what"] == k) for k in FAULTS},
            "not_recovered": sum(1 for f in self.faults if f.get("recover_s") is None),
            "hangs": len(self.hangs), "recover_s_by_kind": by_kind,
            "recover_s_median": sorted(recov)[len(recov) // 2] if recov else None,
            "recover_s_max": max(recov) if recov else None,
        }
        (self.run_dir / "result.json").write_text(json.dumps(
            {"summary": summary, "lost": lost, "no_sacct": no_sacct, "faults": self.faults, "hangs": self.hangs,
             "submitted": self.submitted}, indent=1))
        log("summary: " + json.dumps(summary))
        for item in lost[:20]:
            log(f"LOST: {item}")
        if self.a.out:
            self.write_doc(summary, lost)
        if not self.a.keep:
            self.cli("down", timeout=300)
        return 1 if lost else 0

    def write_doc(self, s: Dict, lost: List[Dict]) -> None:
        def fmt(xs: List[float]) -> str:
            xs = sorted(xs)
            return f"{len(xs)} | {xs[len(xs) // 2]:.1f} | {xs[-1]:.1f}" if xs else "0 | - | -"
        rows = "\n".join(f"| {k} | {fmt(s['recover_s_by_kind'].get(k, []))} |" for k in FAULTS)
        text = f"""## Soak run, {self.a.date} ({self.a.machine})

`make soak` (scripts/soak.py --minutes {self.a.minutes} --seed {self.a.seed}): a local
{self.a.nodes}-node cluster with `--fast-failure --accounting`, a job submitted every 2-6 s
(1-node `sleep`, 2-node `srun`, arrays of 2-5 tasks; all `--requeue`), one random
fault every 20-60 s, held 3-8 s, then `simcluster fault heal`.

| | |
|---|---|
| duration (fault stream) | {s['minutes']} min, then {s['drain_s']:.0f} s for the queue to drain |
| jobs submitted (array tasks counted singly) | {s['jobs_submitted']} ({s['tasks_submitted']} tasks, {s['arrays']} arrays) |
| completed (COMPLETED in sacct/squeue, or its marker written) | {s['completed']} |
| **lost** (a submitted id that never reached COMPLETED) | **{s['lost']}** |
| completed but missing from sacct | {s['completed_not_in_sacct']} |
| sbatch refused (controller down; no job id given) | {s['sbatch_refused']} |
| faults injected | {s['faults']} ({', '.join(f'{k} {v}' for k, v in s['faults_by_kind'].items())}) |
| faults not recovered within {self.a.recover_timeout:.0f} s of heal | {s['not_recovered']} |
| node hangs detected (slurmd alive, not answering) | {s['hangs']} |

Time to recover: from `fault heal` (pause: `fault resume`) until every node is
idle/mixed/allocated again (no `*`, down or drain):

| fault | count | median s | max s |
|---|---|---|---|
{rows}
"""
        if lost:
            text += "\nLost jobs:\n\n" + "\n".join(f"- {x}" for x in lost[:30]) + "\n"
        out = Path(self.a.out)
        head = out.read_text() if out.exists() else "# Reliability\n\n"
        marker = "<!-- soak results -->"
        if marker in head:
            head = head.split(marker)[0]
        out.write_text(head.rstrip() + "\n\n" + marker + "\n\n" + text)
        log(f"wrote {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--name", default="soak")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--run-dir", default=None, help="job markers, outputs, result.json (default /tmp/soak-<time>)")
    ap.add_argument("--out", default=None, help="write the table here (docs/reliability.md)")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--machine", default=f"{os.cpu_count()} cores")
    ap.add_argument("--recover-timeout", type=float, default=120)
    ap.add_argument("--drain-timeout", type=float, default=900)
    ap.add_argument("--keep", action="store_true", help="leave the cluster up at the end")
    return Soak(ap.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
