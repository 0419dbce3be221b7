"""The training suites: DDP, FSDP, DeepSpeed ZeRO-3 and Megatron-core TP across nodes.

Each suite submits one real multi-node job (workloads/torchrun.sbatch or
srun_python.sbatch running a workloads/*.py script), waits for it with a deadline, then
judges the one ``SIMCLUSTER_RESULT {json}`` line rank 0 printed. The jobs use CUDA and
NCCL when their node has a real GPU, else CPU and gloo.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, List, Optional

from provisioner.verify.basic import partition_line, training_partition
from provisioner.verify.context import VerifyContext, free_port, render_template
from provisioner.verify.outcome import CheckFailed, CheckSkipped, Outcome

RESULT_PREFIX = "SIMCLUSTER_RESULT "
TRAIN_TIMEOUT = 240.0  # seconds verify waits for one training job (~10-25 s on 2 CPU cores)
# SIMCLUSTER_VERIFY_BREAK=<suite>:crash|hang makes that suite's job fail on purpose
# (verify's own tests use it to prove failures are reported, never hung on).
BREAK_VAR = "SIMCLUSTER_VERIFY_BREAK"


def parse_result(text: str) -> Optional[Dict]:
    for line in reversed(text.splitlines()):
        idx = line.find(RESULT_PREFIX)
        if idx >= 0:
            try:
                return json.loads(line[idx + len(RESULT_PREFIX):])
            except ValueError:
                return None
    return None


def run_workload(ctx: VerifyContext, suite: str, script: str, template: str, modules: List[str],
                 judge: Callable[[Dict, List[str]], List[str]], summary: Callable[[Dict], str],
                 nodes: int = 2, env: Optional[Dict[str, str]] = None) -> Outcome:
    missing = ctx.target.missing_module(modules)
    if missing:
        raise CheckSkipped(f"{missing} is not installed: {ctx.target.install_hint}")
    place = training_partition(ctx.spec, nodes)
    if place is None:
        raise CheckSkipped(f"needs a partition with at least {nodes} nodes")
    part, members = place
    # One GPU per task when every node of the partition has one: the TaskProlog maps it
    # to the node's physical id (fake GPUs too; the job then falls back to CPU + gloo).
    with_gpu = all(ctx.spec.node(n).gpus for n in members)
    limit = ctx.limit(TRAIN_TIMEOUT)
    check = f"{suite}"
    workdir = ctx.check_dir(check)
    text = render_template(template, {
        "WORKLOAD": suite, "NODES": nodes, "MEM": "512M", "TIME": ctx.time_minutes(limit),
        "GRES_LINE": "#SBATCH --gres=gpu:1" if with_gpu else "", "PARTITION_LINE": partition_line(part),
        "BIN": ctx.target.python_bin, "SCRIPT": ctx.workload(script)})
    job_env = {"MASTER_PORT": str(free_port()), "SIMCLUSTER_CKPT_DIR": ctx.cluster_path(workdir / "checkpoint")}
    job_env.update(env or {})
    brk = os.environ.get(BREAK_VAR, "")
    if brk.startswith(suite + ":"):
        job_env["SIMCLUSTER_BREAK"] = brk.split(":", 1)[1]
    job = ctx.submit(check, text, env=job_env, name=f"{suite}.sbatch")
    ctx.wait_ok(job, limit)
    result = parse_result(ctx.read(job.output))
    if result is None:
        raise CheckFailed("the job finished but printed no SIMCLUSTER_RESULT line", output=job.output)
    problems = common_problems(ctx, result, nodes, with_gpu) + judge(result, members)
    if problems:
        raise CheckFailed("; ".join(problems[:6]), output=job.output, data=result)
    return Outcome(summary(result), data=result, output=job.output)


def common_problems(ctx: VerifyContext, r: Dict, nodes: int, with_gpu: bool) -> List[str]:
    problems = []
    if r.get("world_size") != nodes:
        problems.append(f"world size {r.get('world_size')}, expected {nodes}")
    where = r.get("placement") or []
    used = sorted({p.get("node") for p in where})
    if len(used) != nodes:
        problems.append(f"ranks ran on {used}, expected {nodes} different nodes")
    if with_gpu:
        for p in where:
            node = p.get("node")
            if node in ctx.node_names:
                want = ctx.target.visible_gpus(node, 1)
                if p.get("cuda_visible_devices") != want:
                    problems.append(f"rank {p.get('rank')} on {node} sees CUDA_VISIBLE_DEVICES="
                                    f"{p.get('cuda_visible_devices')!r}, expected {want!r}")
    expected_backend = "nccl" if r.get("device") == "cuda" else "gloo"
    if r.get("backend") != expected_backend:
        problems.append(f"backend {r.get('backend')} on {r.get('device')}, expected {expected_backend}")
    first, last = r.get("loss_first"), r.get("loss_last")
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)) or not last < 0.5 * first:
        problems.append(f"loss did not go down: first {first}, last {last}")
    return problems


def _loss(r: Dict) -> str:
    return f"loss {r['loss_first']:.3f} -> {r['loss_last']:.3f} in {r.get('steps')} steps"


def _where(r: Dict) -> str:
    nodes = "+".join(p.get("node", "?") for p in r.get("placement", []))
    return f"{r.get('world_size')} ranks on {nodes}, {r.get('device')}/{r.get('backend')}"


# -- suites ---------------------------------------------------------------------------------
def check_ddp(ctx: VerifyContext) -> Outcome:
    def judge(r: Dict, members: List[str]) -> List[str]:
        sums = r.get("param_checksums") or []
        if not r.get("params_identical") or len(set(sums)) != 1:
            return [f"parameters differ between ranks at the end: checksums {sums}"]
        return []
    return run_workload(ctx, "ddp", "ddp.py", "torchrun.sbatch", ["torch"], judge,
                        lambda r: f"DDP: {_where(r)}; {_loss(r)}; parameters identical on every rank")


def check_fsdp(ctx: VerifyContext) -> Outcome:
    def judge(r: Dict, members: List[str]) -> List[str]:
        problems = []
        shards = r.get("shards") or []
        full = shards[0]["full_numel"] if shards else 0
        if any(s["dtensor_params"] != s["params"] for s in shards):
            problems.append(f"not every parameter is a sharded DTensor: {shards}")
        if sum(s["local_numel"] for s in shards) != full or any(s["local_numel"] >= full for s in shards):
            problems.append(f"parameters are not split across ranks: {shards}")
        if not r.get("checkpoint_reloaded"):
            problems.append(f"the torch.distributed.checkpoint save in {r.get('checkpoint_dir')} did not reload equal")
        return problems
    return run_workload(ctx, "fsdp", "fsdp.py", "torchrun.sbatch", ["torch"], judge, lambda r: (
        f"FSDP ({r.get('api')}): {_where(r)}; each rank holds "
        f"{'/'.join(str(s['local_numel']) for s in r['shards'])} of {r['shards'][0]['full_numel']} parameters; "
        f"{_loss(r)}; DCP checkpoint ({len(r.get('checkpoint_files', []))} files) reloaded"))


def check_deepspeed(ctx: VerifyContext) -> Outcome:
    def judge(r: Dict, members: List[str]) -> List[str]:
        problems = []
        if r.get("zero_stage") != 3:
            problems.append(f"ZeRO stage {r.get('zero_stage')}, expected 3")
        shards = r.get("shards") or []
        if not shards or any(s["partitioned"] == 0 or s["local_numel"] >= s["full_numel"] for s in shards):
            problems.append(f"parameters are not partitioned across ranks: {shards}")
        return problems
    return run_workload(ctx, "deepspeed", "deepspeed_zero3.py", "srun_python.sbatch", ["torch", "deepspeed"], judge,
                        lambda r: (f"DeepSpeed {r.get('deepspeed')} ZeRO-{r.get('zero_stage')}: {_where(r)}; each rank "
                                   f"holds {'/'.join(str(s['local_numel']) for s in r['shards'])} of "
                                   f"{r['shards'][0]['full_numel']} parameters; {_loss(r)}"))


def check_megatron(ctx: VerifyContext) -> Outcome:
    def judge(r: Dict, members: List[str]) -> List[str]:
        problems = []
        if r.get("tensor_parallel") != 2 or sorted(r.get("tp_rank_of") or []) != [0, 1]:
            problems.append(f"tensor-parallel ranks {r.get('tp_rank_of')}, expected [0, 1]")
        half = (r.get("qkv_rows_full") or 0) // 2
        if not r.get("qkv_rows_local") or any(rows != half for rows in r["qkv_rows_local"]):
            problems.append(f"attention weights not split in two: local rows {r.get('qkv_rows_local')}, "
                            f"full {r.get('qkv_rows_full')}")
        if len(set(r.get("replicated_checksums") or [None, 0])) != 1:
            problems.append(f"replicated weights differ between ranks: {r.get('replicated_checksums')}")
        return problems

    def summary(r: Dict) -> str:
        shims = f"; CPU shims: {', '.join(r['cpu_shims'])}" if r.get("cpu_shims") else ""
        return (f"Megatron-core GPTModel, tensor parallel {r.get('tensor_parallel')}: {_where(r)}; "
                f"{r.get('tp_split_params')} weights split ({r['qkv_rows_local'][0]}/{r['qkv_rows_full']} qkv rows "
                f"per rank); {_loss(r)}{shims}")
    return run_workload(ctx, "megatron", "megatron_tp.py", "torchrun.sbatch", ["torch", "megatron.core"], judge, summary)
