"""`simcluster verify --ssh`: prove a deployed cluster works, from the machine simcluster runs on.

Every command runs on the controller over SSH; jobs are plain sbatch/srun as users run
them. Real hosts share no filesystem, so a batch script carries its files inside itself
and spreads them with sbcast, and its output (written on the job's first node) is read
back with a one-task srun on that node.

Suites: basic (nodes ready, srun on every node, a batch job whose tasks all resolve
MASTER_ADDR, each GPU step seeing its node's physical GPU ids) and ddp (torchrun + DDP
across two nodes, gloo on CPU; needs `simcluster deploy --training`).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from provisioner.deploy.remote_status import parse_gres_conf, parse_scontrol_oneliner
from provisioner.errors import UsageError
from provisioner.slurm import SINFO_NODE_ARGS, parse_sinfo
from provisioner.ssh import SSHSession

SUITES = ("basic", "ddp")
JOB_DIR = "/tmp/simcluster-verify"
TRAINING_BIN = "/opt/simcluster/venv/bin"


@dataclass
class Check:
    suite: str
    name: str
    ok: bool
    seconds: float
    detail: str = ""


class CheckFailed(Exception):
    """Raised inside a check: its message is the check's one-line detail."""


def parse_suites(text: str) -> List[str]:
    names = [s.strip() for s in (text or "basic").split(",") if s.strip()]
    if names == ["all"]:
        return list(SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise UsageError(f"--suite {unknown[0]!r} is not available over --ssh",
                         f"choose from: {', '.join(SUITES)}, all")
    return names


class RemoteCluster:
    """The deployed cluster as seen from its controller: nodes, jobs, their output."""

    def __init__(self, session: SSHSession):
        self.s = session
        self.run_id = uuid.uuid4().hex[:8]
        shown = parse_scontrol_oneliner(self._ok(["scontrol", "show", "nodes", "--oneliner"]).stdout)
        self.nodes = [n["NodeName"] for n in shown]
        self.gpus: Dict[str, List[int]] = parse_gres_conf(self.s.run(["cat", "/etc/slurm/gres.conf"]).stdout)

    def _ok(self, argv: List[str], timeout: float = 60):
        r = self.s.run(argv, timeout=timeout)
        if r.rc != 0:
            raise CheckFailed(f"{' '.join(argv[:3])} exited {r.rc}: {(r.stderr or r.stdout).strip()[-300:]}")
        return r

    def srun(self, args: List[str], timeout: float = 120) -> str:
        return self._ok(["srun", "--time=5", *args], timeout=timeout).stdout

    def sbatch(self, name: str, script: str, timeout: float = 600) -> str:
        """Submit ``script``, wait for it, return its output (read on the job's first node)."""
        path = f"{JOB_DIR}/{self.run_id}-{name}.sh"
        self.s.write_file(path, script, mode=0o755)
        out_file = f"/tmp/simcluster-verify-{self.run_id}-{name}-%j.out"
        # --wait exits with the job's exit code: read the output either way.
        r = self.s.run(["sbatch", "--parsable", "--wait", f"--output={out_file}", "--time=10", path], timeout=timeout)
        job_id = r.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise CheckFailed(f"sbatch failed: {(r.stderr or r.stdout).strip()[-300:]}")
        info = self.s.run(["scontrol", "show", "job", "--oneliner", job_id]).stdout
        m = re.search(r"\bBatchHost=(\S+)", info)
        state = re.search(r"\bJobState=(\S+)", info)
        if not m:
            raise CheckFailed(f"job {job_id} finished but its batch host is unknown: {info.strip()[:200]}")
        text = self.srun(["-N1", "-n1", f"--nodelist={m.group(1)}", "sh", "-c",
                          f"cat {out_file.replace('%j', job_id)} && rm -f {out_file.replace('%j', job_id)}"])
        if state and state.group(1) != "COMPLETED":
            raise CheckFailed(f"job {job_id} ended {state.group(1)}: {_tail(text)}")
        return text

    def cleanup(self) -> None:
        self.s.run_shell(f"rm -f {JOB_DIR}/{self.run_id}-*")


def _tail(text: str, lines: int = 4) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


# -- basic -----------------------------------------------------------------------------------
def check_nodes_ready(c: RemoteCluster) -> str:
    states = parse_sinfo(c._ok(SINFO_NODE_ARGS).stdout)
    bad = [f"{n} {states[n].state if n in states else 'missing'}" for n in c.nodes
           if n not in states or not states[n].ready]
    if bad or not c.nodes:
        raise CheckFailed("not ready: " + (", ".join(bad) or "no nodes"))
    return f"{len(c.nodes)} nodes ready"


def check_srun_every_node(c: RemoteCluster) -> str:
    out = c.srun([f"-N{len(c.nodes)}", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME"])
    seen = sorted(out.split())
    if seen != sorted(c.nodes):
        raise CheckFailed(f"expected one task on each of {', '.join(c.nodes)}, got {', '.join(seen) or 'nothing'}")
    return f"srun -N{len(c.nodes)} ran on {', '.join(seen)}"


BASIC_JOB = """#!/bin/bash
#SBATCH --job-name=simcluster-verify-basic
#SBATCH --nodes={n} --ntasks-per-node=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "master=$MASTER_ADDR"
srun bash -c 'if getent hosts "$MASTER_ADDR" >/dev/null; then echo "RESOLVES $SLURMD_NODENAME $MASTER_ADDR"; else echo "NO_RESOLVE $SLURMD_NODENAME $MASTER_ADDR"; fi'
"""


def check_batch_master_addr(c: RemoteCluster) -> str:
    out = c.sbatch("basic", BASIC_JOB.format(n=len(c.nodes)))
    ok = sorted(line.split()[1] for line in out.splitlines() if line.startswith("RESOLVES "))
    if ok != sorted(c.nodes):
        raise CheckFailed(f"not every task resolved MASTER_ADDR: {_tail(out)}")
    master = re.search(r"master=(\S+)", out)
    return f"sbatch across {len(c.nodes)} nodes; MASTER_ADDR={master.group(1) if master else '?'} resolves on all"


def check_gpu_ids(c: RemoteCluster) -> Optional[str]:
    with_gpus = [n for n in c.nodes if c.gpus.get(n)]
    if not with_gpus:
        return None
    out = c.srun([f"-N{len(with_gpus)}", f"--nodelist={','.join(with_gpus)}", "--ntasks-per-node=1",
                  "--gres=gpu:1", "bash", "-c", 'echo "$SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-none}"'])
    seen = dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)
    wrong = [f"{n} sees {seen.get(n, 'nothing')} (owns {c.gpus[n]})" for n in with_gpus
             if seen.get(n, "").split(",")[0] not in {str(g) for g in c.gpus[n]}]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return "each GPU step sees its node's physical GPU ids: " + ", ".join(f"{n}={seen[n]}" for n in with_gpus)


# -- ddp -------------------------------------------------------------------------------------
DDP_JOB = """#!/bin/bash
#SBATCH --job-name=simcluster-verify-ddp
#SBATCH --nodes=2 --ntasks-per-node=1 --cpus-per-task=1
set -e
export PATH={bin}:$PATH
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))
script=/tmp/simcluster-verify-$SLURM_JOB_ID-ddp.py
cat > "$script.src" <<'PYEOF'
{script}
PYEOF
# No shared filesystem: copy the script to every node of the job.
sbcast -f "$script.src" "$script"
rm -f "$script.src"
srun bash -c 'command -v torchrun >/dev/null || {{ echo "NO_TORCH on $SLURMD_NODENAME"; exit 3; }}'
# \\$SLURM_NODEID is expanded by each task, not here (where it is always 0).
srun bash -c "OMP_NUM_THREADS=1 torchrun --nnodes=$SLURM_NNODES --nproc_per_node=1 --node_rank=\\$SLURM_NODEID \\
  --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT $script; rc=\\$?; rm -f $script; exit \\$rc"
"""


def check_ddp(c: RemoteCluster) -> str:
    if len(c.nodes) < 2:
        raise CheckFailed("ddp needs at least 2 nodes")
    script = (Path(__file__).parent / "ddp_check.py").read_text()
    try:
        out = c.sbatch("ddp", DDP_JOB.format(bin=TRAINING_BIN, script=script.rstrip()), timeout=900)
    except CheckFailed as exc:
        if "NO_TORCH" in str(exc):
            raise CheckFailed("torch is not installed on the nodes: run 'simcluster deploy --training'") from None
        raise
    ranks = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in out.splitlines() if line.startswith("DDP_OK ")]
    if len(ranks) != 2 or {r["world"] for r in ranks} != {"2"}:
        raise CheckFailed(f"expected 2 ranks to finish, got {len(ranks)}: {_tail(out)}")
    if len({r["checksum"] for r in ranks}) != 1:
        raise CheckFailed(f"ranks ended with different weights: {[r['checksum'] for r in ranks]}")
    if len({r["host"] for r in ranks}) != 2:
        raise CheckFailed(f"both ranks ran on {ranks[0]['host']}")
    return (f"torchrun DDP ({ranks[0]['backend']}) on {', '.join(sorted(r['host'] for r in ranks))}: "
            f"all_reduce ok, identical weights")


SUITE_CHECKS: Dict[str, List] = {
    "basic": [("nodes ready", check_nodes_ready), ("srun on every node", check_srun_every_node),
              ("batch job, MASTER_ADDR resolves", check_batch_master_addr), ("GPU ids per step", check_gpu_ids)],
    "ddp": [("torchrun DDP across 2 nodes", check_ddp)],
}


def run_suites(session: SSHSession, suites: List[str], progress: Callable[[str], None]) -> List[Check]:
    """Run the suites' checks in order; a failed check does not stop the others."""
    cluster = RemoteCluster(session)
    results: List[Check] = []
    try:
        for suite in suites:
            for name, fn in SUITE_CHECKS[suite]:
                t0 = time.monotonic()
                try:
                    detail = fn(cluster)
                    if detail is None:
                        continue  # not applicable (e.g. no GPUs)
                    check = Check(suite, name, True, time.monotonic() - t0, detail)
                except CheckFailed as exc:
                    check = Check(suite, name, False, time.monotonic() - t0, str(exc))
                results.append(check)
                progress(f" - {suite}: {name} ... {'ok' if check.ok else 'FAILED'} ({check.seconds:.1f}s)")
    finally:
        cluster.cleanup()
    return results


def report(results: List[Check]) -> str:
    width = max([len(r.name) for r in results] + [10])
    lines = [f"{'SUITE':<6} {'CHECK':<{width}} {'RESULT':<6} {'TIME':>6}  DETAIL"]
    for r in results:
        lines.append(f"{r.suite:<6} {r.name:<{width}} {'PASS' if r.ok else 'FAIL':<6} {r.seconds:>5.1f}s  {r.detail}")
    passed = sum(r.ok for r in results)
    lines.append(f"{passed} of {len(results)} checks passed")
    return "\n".join(lines)


def as_dicts(results: List[Check]) -> List[Dict]:
    return [asdict(r) for r in results]


def verify_over_ssh(ssh: str, ssh_key: Optional[str], known_hosts: Optional[str], insecure_host_key: bool,
                    suite: str, as_json: bool, progress: Callable[[str], None]) -> int:
    """What `simcluster verify --ssh ...` does: run the suites, print the report, return the exit code."""
    import json

    import click

    from provisioner.deploy.options import open_session
    suites = parse_suites(suite)
    with open_session(ssh, ssh_key, known_hosts, insecure_host_key) as session:
        progress(f"verifying the cluster behind {session.target}: {', '.join(suites)}")
        results = run_suites(session, suites, progress)
    if as_json:
        click.echo(json.dumps({"target": ssh, "passed": all(r.ok for r in results), "checks": as_dicts(results)},
                              indent=2))
    else:
        click.echo(report(results))
    return 0 if results and all(r.ok for r in results) else 1
