"""`fault gpu NODE [--gpu N] (--xid N | --ecc N | --lost)`: a fake GPU reports a fault, as a
real one does to its driver; heal clears it and resumes the node (docs/faults.md).

The fault goes to gpu-faults.json in the cluster's config directory (fakegpus/gpu_faults.py:
the one file the nvidia-smi shim, the health check and `status` read) and, as the driver
writes it, to the node's kernel-log stand-in <config dir>/kmsg/<node>. What follows is the
cluster's: nvidia-smi shows the GPU lost or with ERR! fields and ECC counts, and the
cluster's health check (healthCheck: in the spec) drains the node within its interval.

A fault after which the GPU's CUDA processes die (Xid 79 and the other fatal Xids, a lost
GPU: gpu_faults.XIDS) kills the job processes on the node that hold that GPU with SIGKILL, as
a CUDA process that dies with "unspecified launch failure" or "GPU is lost" would: the tasks
of the srun steps that hold it (the step fails; the batch script sees srun fail and goes on
as it is written to), else, where the batch script runs its GPU program itself, the batch
step's processes (the job FAILED). Other nodes' tasks of the job run on, as in production
(an NCCL job's other ranks hang or abort by themselves).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.faults.record import active, check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.cluster.model.provider import NodeProcesses
from provisioner.cluster.services.fakegpus import gpu_faults
from provisioner.cluster.services.fakegpus.gpu_health import OWN_REASON
from provisioner.cluster.services.fakegpus.nvidia_smi import bus_id
from provisioner.errors import UsageError


def faults_file(c: Cluster) -> Path:
    return Path(c.placement.config_dir) / gpu_faults.FAULTS_FILE


def _node_gpus(c: Cluster, node: str) -> int:
    """How many fake GPUs ``node`` has; a one-line UsageError where it has none."""
    n = len(c.spec.node(node).gpus) if c.spec.fake_gpus else 0
    if not n:
        what = "has no fake GPUs (real ones)" if c.spec.node(node).gpus else "has no GPUs"
        raise UsageError(f"node {node} of cluster '{c.name}' {what}: `fault gpu` "
                         "injects faults into fake GPUs only",
                         "make a cluster with fake GPUs: simcluster up --fake-gpus N")
    return n


def inject_gpu(c: Cluster, node: str, gpu: int = 0, xid: Optional[int] = None, ecc: Optional[int] = None,
               lost: bool = False) -> str:
    check_can_inject(c, node)
    count = _node_gpus(c, node)
    if sum(x is not None and x is not False for x in (xid, ecc, lost)) != 1:
        raise UsageError("give one fault: --xid N, --ecc N or --lost",
                         f"e.g. simcluster fault gpu {node} --xid 79")
    if not 0 <= gpu < count:
        raise UsageError(f"node {node} has GPUs 0-{count - 1}, not {gpu}", f"--gpu 0 ... --gpu {count - 1}")
    if xid is not None and not 1 <= xid <= 999:
        raise UsageError(f"--xid takes an Xid of 1-999, not {xid}", "e.g. --xid 79 (fallen off the bus), --xid 48")
    if ecc is not None and ecc < 1:
        raise UsageError("--ecc takes a number of uncorrectable ECC errors of at least 1")
    path = faults_file(c)
    faults = gpu_faults.read_faults(str(path))
    # Xid 48 is an uncorrectable (double-bit) ECC error: the count says so to every reader.
    fault = {"xid": xid, "ecc_errors": ecc or (1 if xid == 48 else 0), "lost": bool(lost),
             "since": gpu_faults.iso_now()}
    faults.setdefault(node, {})[str(gpu)] = fault
    gpu_faults.write_faults(str(path), faults)
    killed = _kill_gpu_tasks(c, node, gpu) if gpu_faults.fault_kills(fault) else []
    _log_kernel(c, node, gpu, fault, killed)
    if not active(c, "gpu", node):
        record(c, "gpu", node, gpu=gpu)
    what = (f"Xid {xid} ({gpu_faults.xid_text(xid)})" if xid is not None else
            "lost (fallen off the bus)" if lost else f"{ecc} uncorrectable ECC errors")
    lines = [f"node {node} gpu{gpu}: {what}; in {path.name} and the kernel log {_kmsg(c, node)}"]
    if killed:
        lines.append(f"killed {len(killed)} job processes on gpu{gpu} (SIGKILL, as a CUDA process dies of it)")
    if xid is not None and not gpu_faults.xid_drains(xid):
        lines.append(f"Xid {xid} is an application's error: health checks leave the node in service")
    elif c.spec.health_check is None:
        lines.append("this cluster runs no health check (healthCheck: in the spec): nothing drains the node")
    else:
        lines.append(f"the health check drains {node} within {c.spec.health_check.interval} s")
    return "\n".join(lines)


def _kmsg(c: Cluster, node: str) -> Path:
    return Path(gpu_faults.kmsg_path(str(c.placement.config_dir), node))


def _log_kernel(c: Cluster, node: str, gpu: int, fault: Dict, killed: List[Tuple[int, str]]) -> None:
    """The driver's line in the node's kernel-log stand-in (seconds since the cluster started as
    the kernel's uptime stamp)."""
    path = _kmsg(c, node)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = getattr(c.state, "created", None) or time.time()
    try:
        uptime = max(0.0, time.time() - float(started))
    except (TypeError, ValueError):
        uptime = 0.0
    with open(path, "a") as fh:
        pid, name = killed[-1] if killed else (0, "")
        fh.write(gpu_faults.kmsg_line(uptime, bus_id(gpu), fault, pid=pid, process=name))
    path.chmod(0o644)


def _holder(environ: bytes) -> Optional[tuple]:
    """(the GPU indices a job process holds on its node: SLURM_STEP_GPUS, else SLURM_JOB_GPUS;
    whether it is a task of an srun step) or None for a process that is not a job's."""
    env = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
    if b"SLURM_JOB_ID" not in env:
        return None
    ids = env.get(b"SLURM_STEP_GPUS", env.get(b"SLURM_JOB_GPUS", b""))
    return {int(x) for x in ids.split(b",") if x.strip().isdigit()}, b"SLURM_STEP_ID" in env


def _kill_gpu_tasks(c: Cluster, node: str, gpu: int) -> List[Tuple[int, str]]:
    """SIGKILL the job processes on ``node`` that hold GPU ``gpu``: the tasks of srun steps that
    hold it where there are any (the batch script sees its srun fail, as in production), else
    the batch step's processes (a script that runs its GPU program without srun fails with
    it). Returns (pid, name) of each; [] where the backend cannot list a node's processes."""
    if not isinstance(c.provider, NodeProcesses):
        return []
    runner = c.runner(node)
    steps, batch = [], []
    for pid in c.provider.node_pids(c.state, node):
        environ = runner.read_file(f"/proc/{pid}/environ")
        held = _holder(environ) if environ else None
        if held and gpu in held[0]:
            name = (runner.read_file(f"/proc/{pid}/comm") or b"?").decode(errors="replace").strip()
            (steps if held[1] else batch).append((pid, name))
    killed = steps or batch
    runner.kill([pid for pid, _ in killed], signal.SIGKILL)
    return killed


def clear_gpu(c: Cluster, fault: Dict) -> str:
    """Heal's undo of a `fault gpu` record: the node's GPUs healthy again (its entries leave
    gpu-faults.json) and the node resumed where the health check drained it; a drain with
    another reason (an admin's) stays."""
    node = fault["node"]
    path = faults_file(c)
    faults = gpu_faults.read_faults(str(path))
    faults.pop(node, None)
    gpu_faults.write_faults(str(path), faults)
    res = c.client.run(["sinfo", "-h", "-n", node, "-o", "%T|%E"], timeout=20)
    state, _, reason = (res.stdout.strip().splitlines() or [""])[0].partition("|") if res.ok else ("", "", "")
    if "drain" in state and OWN_REASON.match(reason):
        done = c.client.run(["scontrol", "update", f"nodename={node}", "state=resume"], timeout=20)
        if not done.ok and "Invalid node state" not in done.stderr:
            raise UsageError(f"resuming {node} failed: {done.error_line()}")
        return f"undrained {node} (GPU fault cleared; the health check drained it: {reason})"
    return f"cleared {node}'s GPU fault"
