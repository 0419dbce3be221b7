"""`simcluster check --run`: run a batch script on a throwaway cluster shaped by its header.

A local cluster named chk-XXXXXX (its own ports, munged and state directory) gets the
header's nodes, CPUs, memory and GPUs (fake ones); the script is submitted with sbatch
with a recorder first on PATH (and as exported bash functions, so `source venv/bin/activate`
in the script does not hide it) for python, python3, torchrun, deepspeed and accelerate.
Each process that would train writes its rank environment instead (recorder.py). The
records are then checked for collisions: duplicate ranks, missing ranks, disagreeing
world sizes or rendezvous addresses, unresolvable MASTER_ADDR, GPUs shared between ranks.
The cluster is always taken down, on errors and Ctrl-C too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from provisioner.check.asks import ask_of
from provisioner.check.fit import describe as describe_cluster, fits_node
from provisioner.check.launch import classify
from provisioner.check.mirror import Target, dry_run_spec
from provisioner.check.parse import parse_script
from provisioner.check.rules import context_of
from provisioner.check.rules.core import ERROR, LOOPBACK_RE, WARNING, Finding
from provisioner.check.shape import Shape, shape_of
from provisioner.cluster.model.state import simcluster_home
from provisioner.cluster.model.wait import WaitTimeout, poll_until
from provisioner.config import load_spec
from provisioner.config.overrides import spec_overrides
from provisioner.errors import SimclusterError, UsageError
from provisioner.named_clusters import down, load, up
from provisioner.providers import provider_named

TOOLS = ("python", "python3", "torchrun", "deepspeed", "accelerate")
MAX_NODES = 64
# Pending reasons of a job that waits for a partition or account setting, not for nodes to free up
NEVER_STARTS = ("PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "AccountNotAllowed",
                "QOSNotAllowed", "InvalidAccount", "InvalidQOS", "BadConstraints")
REFUSED = "refused by sbatch: "
PENDING_FOREVER = "PENDING forever"
DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
               "BOOT_FAIL", "DEADLINE")


@dataclass
class RunResult:
    cluster: str
    shape: Shape
    job_id: str = ""
    state: str = ""
    seconds: float = 0.0
    up_seconds: float = 0.0
    records: List[Dict] = field(default_factory=list)
    findings: List[Finding] = field(default_factory=list)
    output_tail: str = ""
    real: bool = False
    # True where each node numbers its own GPUs from 0 (device cgroups, containers): a GPU
    # is then (node, id), and GPU 0 of node1 and of node2 are two GPUs, as on real hosts.
    gpus_per_node_ids: bool = False

    def to_dict(self) -> Dict:
        return {"cluster": self.cluster, "nodes": self.shape.nodes_max, "job_id": self.job_id, "state": self.state,
                "seconds": round(self.seconds, 2), "up_seconds": round(self.up_seconds, 2),
                "processes": self.records, "collisions": [f.to_dict() for f in self.findings]}

    def table(self) -> str:
        if not self.job_id:  # sbatch refused it (a copy of the job's cluster: --like/--config)
            return (f"dry run: {self.state or 'not run'} (cluster {self.cluster}, up in {self.up_seconds:.1f}s): "
                    "nothing ran")
        head = (f"{'run (--real)' if self.real else 'dry run'}: job {self.job_id or '-'} {self.state or 'not run'} in {self.seconds:.1f}s on "
                f"{self.shape.nodes_max} node{'s' if self.shape.nodes_max != 1 else ''} "
                f"(cluster {self.cluster}, up in {self.up_seconds:.1f}s): {len(self.records)} process"
                f"{'es' if len(self.records) != 1 else ''} {'recorded' if self.real else 'would train'}")
        rows = [head]
        for r in self.records:
            e = r["env"]
            rows.append(f"  {describe(r):<32} RANK={e.get('RANK')} LOCAL_RANK={e.get('LOCAL_RANK')} "
                        f"WORLD_SIZE={e.get('WORLD_SIZE')} MASTER={e.get('MASTER_ADDR')}:{e.get('MASTER_PORT')} "
                        f"GPU={r.get('gpu')}")
        if not self.records and self.output_tail:
            rows.append("  job output (last lines):\n" + "\n".join("    " + x for x in self.output_tail.splitlines()))
        return "\n".join(rows)


def describe(r: Dict) -> str:
    """'node2 task 1 torchrun worker 0' for a record."""
    who = f"{r['node']} task {r.get('task') if r.get('task') is not None else 'batch'}"
    if r.get("worker") is not None:
        who += f" {r['launcher']} worker {r['worker']}"
    return who


def _shims(bin_dir: Path, real: bool) -> Dict[str, str]:
    """Write the PATH shims; return the environment that makes them win (PATH and bash functions)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    recorder = Path(__file__).with_name("recorder.py")
    for tool in TOOLS:
        shim = bin_dir / tool
        shim.write_text(f"#!/bin/sh\nexec {sys.executable} {recorder} {tool} \"$@\"\n")
        shim.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "SIMCLUSTER_CHECK_BIN": str(bin_dir),
           "SIMCLUSTER_CHECK_REAL": "1" if real else "0"}
    # Exported functions reach the batch shell and every `bash -c` of a step, and win over a
    # PATH that `source venv/bin/activate` changed; srun puts the shims first again for its tasks.
    for tool in TOOLS:
        env[f"BASH_FUNC_{tool}%%"] = f'() {{  "{bin_dir}/{tool}" "$@"\n}}'
    env["BASH_FUNC_srun%%"] = f'() {{  PATH="{bin_dir}:$PATH" command srun "$@"\n}}'
    if not real:
        # environment managers of the user's cluster: nothing to activate in a dry run
        env["BASH_FUNC_conda%%"] = "() {  :\n}"
        env["BASH_FUNC_module%%"] = "() {  :\n}"
    return env


def cluster_spec(shape: Shape, name: str):
    """The ClusterSpec of the throwaway cluster: the header's shape, fake GPUs."""
    nodes = shape.nodes_max
    if nodes > MAX_NODES:
        raise UsageError(f"--run makes at most {MAX_NODES} nodes; the script asks for {nodes}",
                         "lower #SBATCH --nodes for the dry run")
    return load_spec(None, spec_overrides(
        name=name, backend="local", nodes=nodes, cpus=max(shape.cpus_per_node, 1), wait=60,
        memory=max(shape.mem_mb, 64) if shape.mem_mb else None,
        fake_gpus=shape.gpus_per_node * nodes if shape.gpus_per_node else None))


def dry_run(path: str, text: str, real: bool = False, timeout: float = 120.0,
            progress: Callable[[str], None] = lambda m: None, nodes: Optional[int] = None,
            target: Optional[Target] = None) -> RunResult:
    """Run ``path`` on a throwaway cluster and check what its processes would get (``nodes``:
    the sbatch -N it is submitted with; a clearly multi-node script without --nodes gets 2).
    The cluster is shaped by the header, or is a copy of ``target`` (check --like/--config)."""
    script = parse_script(path, text)
    shape = context_of(script, nodes).shape
    name = "chk-" + uuid.uuid4().hex[:6]
    result = RunResult(cluster=name, shape=shape, real=real)
    if target is not None:
        ask = ask_of(script, nodes)
        default = next((p.name for p in target.spec.partitions if p.default), target.spec.partitions[0].name)
        spec = dry_run_spec(target.spec, name, ask.partitions or [default], shape.nodes_max, MAX_NODES,
                            fits=lambda n: fits_node(ask, n))
    else:
        spec = cluster_spec(shape, name)
    scratch = Path(tempfile.mkdtemp(prefix="simcluster-check-"))
    records = scratch / "records"
    records.mkdir()
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    made = False
    try:
        t0 = time.monotonic()
        made = True
        up(spec, provider_named("local"), progress=lambda m: None)
        result.up_seconds = time.monotonic() - t0
        result.gpus_per_node_ids = load(name).placement.gpus_renumbered
        if target is not None:
            progress(f" - cluster {name}: a copy of {target.label}: {describe_cluster(spec)}, up in "
                     f"{result.up_seconds:.2f}s")
        else:
            gpus = f", {shape.gpus_per_node} fake GPU{'s' if shape.gpus_per_node != 1 else ''} each" \
                if shape.gpus_per_node else ""
            cpus = spec.nodes[0].cpus
            progress(f" - cluster {name}: {shape.nodes_max} nodes{gpus}, {cpus} CPU{'s' if cpus != 1 else ''}, "
                     f"{spec.nodes[0].memory} MB each, up in {result.up_seconds:.2f}s")
        _submit_and_wait(result, spec, script, path, scratch, records, real, timeout, progress,
                         mirror=target is not None)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if made:
            try:
                down(name)
                progress(f" - cluster {name} removed")
            except SimclusterError as exc:  # nothing left to remove: up failed and cleaned up itself
                progress(f" - cluster {name}: {exc.one_line()}")
        shutil.rmtree(scratch, ignore_errors=True)
        # the per-name lock file `up`/`down` leave in $SIMCLUSTER_HOME: this random name is
        # never used again, so it would only pile up
        (simcluster_home() / f".{name}.lock").unlink(missing_ok=True)
    result.findings = collisions(result, script)
    return result


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _submit_and_wait(result: RunResult, spec, script, path: str, scratch: Path, records: Path, real: bool,
                     timeout: float, progress, mirror: bool = False) -> None:
    cluster = load(spec.name)
    env = _shims(scratch / "bin", real)
    env["SIMCLUSTER_CHECK_DIR"] = str(records)
    out = scratch / "job.out"
    args = ["sbatch", "--parsable", f"--output={out}", f"--error={out}"]
    if not mirror:
        # the header's partition, account and typed GPUs are those of its own cluster; a copy of
        # that cluster (--like/--config) has them, the cluster shaped by the header does not
        default = next((p.name for p in spec.partitions if p.default), spec.partitions[0].name)
        args.append(f"--partition={default}")
    if script.opt("nodes") is None or result.shape.nodes_max != shape_of(script).nodes_max:
        args.append(f"--nodes={result.shape.nodes_max}")  # given at submission (check --nodes, or -N 2)
    gres = script.opt("gres")
    if not mirror and gres and shape_gpu_typed(gres.value) and result.shape.gpus_per_node:
        args.append(f"--gres=gpu:{result.shape.gpus_per_node}")  # fake GPUs have no type
    t0 = time.monotonic()
    res = cluster.client.run(args + [str(Path(path).resolve())], env=env, cwd=str(scratch))
    if not res.ok and not mirror:
        raise UsageError(f"sbatch refused {path} on the dry-run cluster: {res.error_line()}")
    if not res.ok:
        # a copy of the job's own cluster refuses what that cluster refuses: a finding, not a failure
        result.state = REFUSED + res.error_line()
        progress(f" - sbatch refused the job: {res.error_line()}")
        return
    job = res.stdout.strip().split(";")[0]
    result.job_id = job
    def ended():
        info = cluster.client.show_job(job)
        state = info.get("JobState", "")
        reason = info.get("Reason", "")
        if mirror and state == "PENDING" and reason.startswith(NEVER_STARTS):
            cluster.client.scancel(job)
            return True, f"{PENDING_FOREVER} (Reason={reason}; cancelled)"
        return state in DONE_STATES, state
    try:
        state = poll_until(ended, timeout, first_delay=0.2, max_delay=0.2)
    except WaitTimeout:
        cluster.client.scancel(job)
        state = f"TIMEOUT after {timeout:.0f}s (cancelled)"
    result.state = state
    result.seconds = time.monotonic() - t0
    progress(f" - job {job} {state} in {result.seconds:.1f}s")
    rec = records / "records.jsonl"
    if rec.exists():
        result.records = sorted((json.loads(x) for x in rec.read_text().splitlines() if x.strip()),
                                key=lambda r: (r["node"], str(r.get("task")), r.get("worker") or 0))
    if out.exists():
        result.output_tail = "\n".join(out.read_text(errors="replace").splitlines()[-15:])


def shape_gpu_typed(gres: str) -> bool:
    return any(item.startswith("gpu:") and len(item.split(":")) == 3 for item in gres.split(","))


def _line_of(script, record: Dict) -> int:
    """The line of the launch a record came from (by launcher and program), else the first launch."""
    best = None
    for cmd in script.commands:
        launch = classify(cmd.words())
        if launch is None:
            continue
        if best is None:
            best = cmd.line
        prog = os.path.basename(launch.program)
        if launch.kind == record.get("launcher") and (prog == os.path.basename(record.get("program") or "")
                                                       or "$" in prog):
            return cmd.line
    return best or 1


def collisions(result: RunResult, script) -> List[Finding]:
    """Findings from the records: duplicate/missing ranks, world sizes, MASTER_ADDR, GPUs."""
    recs = result.records
    path = script.path
    n = result.shape.nodes_max
    on = f"on {n} node{'s' if n != 1 else ''}"
    out: List[Finding] = []

    def add(rec_or_line, severity, rule, message):
        line = rec_or_line if isinstance(rec_or_line, int) else _line_of(script, rec_or_line)
        out.append(Finding(path, line, severity, rule, message, source="run"))

    if result.state.startswith((REFUSED, PENDING_FOREVER)):
        what = (f"refused the job ({result.state[len(REFUSED):]})" if result.state.startswith(REFUSED)
                else f"kept the job {result.state}")
        add(min((o.line for o in script.header), default=1), ERROR, "run.not-started",
            f"the copy of the job's cluster {what}: nothing ran (the header's findings say why)")
        return out
    if not recs:
        launches_static = [c for c in script.commands if classify(c.words()) is not None]
        add(launches_static[0].line if launches_static else 1, WARNING, "run.no-process",
            f"the job ({result.state or 'not run'}) launched no python/torchrun/deepspeed/accelerate process "
            "that would train")
        return out
    by_rank = defaultdict(list)
    for r in recs:
        rank = r["env"].get("RANK")
        if rank is None:
            continue
        by_rank[rank].append(r)
    unset = [r for r in recs if r["env"].get("RANK") is None]
    if unset:
        add(unset[0], WARNING, "run.rank-unset",
            f"{len(unset)} process{'es' if len(unset) != 1 else ''} ({', '.join(describe(r) for r in unset[:4])}) "
            "got no RANK: init_process_group(init_method='env://') fails unless the program reads SLURM_PROCID")
    for rank, rs in sorted(by_rank.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
        if len(rs) > 1:
            add(rs[0], ERROR, "run.duplicate-rank",
                f"duplicate rank {rank} {on}: {' and '.join(describe(r) for r in rs[:6])} "
                f"{'both' if len(rs) == 2 else 'all'} have RANK={rank}")
    sizes = Counter(r["env"].get("WORLD_SIZE") for r in recs if r["env"].get("WORLD_SIZE") is not None)
    if len(sizes) > 1:
        add(recs[0], ERROR, "run.world-size-disagree",
            "processes disagree on WORLD_SIZE: " + ", ".join(f"{v} ({c} processes)" for v, c in sizes.items()))
    if sizes:
        world = sizes.most_common(1)[0][0]
        if world and world.isdigit():
            missing = sorted(set(range(int(world))) - {int(k) for k in by_rank if k.isdigit()})
            if missing:
                shown = ",".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
                add(recs[0], ERROR, "run.missing-rank",
                    f"missing rank{'s' if len(missing) != 1 else ''} {shown} of WORLD_SIZE {world} {on}: "
                    "the others wait for them at init (a hang)")
            extra = sorted(int(k) for k in by_rank if k.isdigit() and int(k) >= int(world))
            if extra:
                shown = ",".join(map(str, extra[:16])) + (" ..." if len(extra) > 16 else "")
                add(recs[0], ERROR, "run.rank-out-of-range",
                    f"{len(recs)} processes for WORLD_SIZE {world} {on}: rank{'s' if len(extra) != 1 else ''} "
                    f"{shown} lie outside the world (their launchers wait for a rendezvous that is already full)")
    addrs = Counter(r["env"].get("MASTER_ADDR") for r in recs if by_rank)
    if len(addrs) > 1:
        add(recs[0], ERROR, "run.master-disagree",
            "processes disagree on MASTER_ADDR: " + ", ".join(f"{a!r} ({c})" for a, c in addrs.items()))
    ports = Counter(r["env"].get("MASTER_PORT") for r in recs if by_rank)
    if len(ports) > 1:
        add(recs[0], ERROR, "run.master-disagree",
            "processes disagree on MASTER_PORT: " + ", ".join(f"{a!r} ({c})" for a, c in ports.items()))
    for r in recs:
        addr = r["env"].get("MASTER_ADDR")
        if by_rank and not addr:
            add(r, ERROR, "run.master-unresolvable", f"{describe(r)} has no MASTER_ADDR: env:// init cannot start")
            break
        if addr and r.get("master_resolves") is False:
            add(r, ERROR, "run.master-unresolvable", f"MASTER_ADDR={addr} does not resolve on {r['node']}")
            break
    nodes_seen = {r["node"] for r in recs}
    loop = [r for r in recs if LOOPBACK_RE.match(r["env"].get("MASTER_ADDR") or "")]
    if loop and len(nodes_seen) > 1:
        add(loop[0], ERROR, "run.master-loopback",
            f"MASTER_ADDR={loop[0]['env']['MASTER_ADDR']} on {len(nodes_seen)} nodes: each node rendezvous with itself")
    if result.shape.gpus_per_node:
        by_gpu = defaultdict(list)
        for r in recs:
            gpu = r.get("gpu")
            if gpu and gpu.startswith("missing:"):
                idx, count = gpu[len("missing:"):].split("/")
                add(r, ERROR, "run.gpu-missing",
                    f"{describe(r)} would use cuda:{idx} but sees {count} GPU{'s' if count != '1' else ''} "
                    f"(CUDA_VISIBLE_DEVICES={r['env'].get('CUDA_VISIBLE_DEVICES')})")
            elif gpu:
                by_gpu[f"{gpu} of {r['node']}" if result.gpus_per_node_ids else gpu].append(r)
        for gpu, rs in sorted(by_gpu.items()):
            ranks = {r["env"].get("RANK") for r in rs}
            if len(rs) > 1:
                add(rs[0], ERROR, "run.gpu-shared",
                    f"GPU {gpu} shared by {len(rs)} processes: "
                    + " and ".join(f"{describe(r)} (RANK={r['env'].get('RANK')})" for r in rs[:6])
                    + ("" if len(ranks) > 1 else ""))
    return out
