"""The recorder `check --run` puts first on PATH as python, python3, torchrun, deepspeed and accelerate.

Run as `recorder.py TOOL ARGS...` by the small shims dryrun.py writes. For a training
launch it appends one JSON line per process that would train to $SIMCLUSTER_CHECK_DIR/records.jsonl,
with the rank environment that process gets: for `python train.py` its own environment,
for torchrun / `python -m torch.distributed.run|launch` / deepspeed / accelerate one line per
worker they would spawn, with the variables they would give it. Then it exits 0 (no
training), or with $SIMCLUSTER_CHECK_REAL=1 runs the real command. Anything that is not a
training launch (`python -c ...`, `python -m pip`) runs the real program unchanged.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from provisioner.check.launch import Launch, classify, parse_nnodes  # noqa: E402

RECORD_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
              "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


def _real(tool: str) -> Optional[str]:
    """``tool`` on PATH, the shim directory left out."""
    shim = os.environ.get("SIMCLUSTER_CHECK_BIN", "")
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.path.realpath(d) != os.path.realpath(shim or "/nonexistent"):
            p = os.path.join(d, tool)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    # not on PATH (the script would have activated its environment, but the shims made it look
    # there already): the tools next to the python the recorder runs with
    beside = os.path.join(os.path.dirname(sys.executable), tool)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return sys.executable if tool.startswith("python") else None


def _exec_real(tool: str, args: List[str]) -> None:
    path = _real(tool)
    if path is None:
        sys.stderr.write(f"{tool}: command not found\n")
        sys.exit(127)
    os.execv(path, [tool] + args)


def _resolves(addr: str) -> bool:
    try:
        return bool(socket.getaddrinfo(addr, None))
    except (OSError, UnicodeError):
        return False


def _gpu(env: Dict[str, str]) -> Optional[str]:
    """The GPU (id as this host numbers them) a process that does set_device(LOCAL_RANK) uses."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if not cvd:
        return None
    ids = [x for x in cvd.split(",") if x]
    lr = env.get("LOCAL_RANK", "0")
    idx = int(lr) if lr.isdigit() else 0
    return ids[idx] if idx < len(ids) else f"missing:{idx}/{len(ids)}"


def _int(value: Optional[str], default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


def _rendezvous_rank(key: str) -> int:
    """c10d-style group rank: agents of one rendezvous numbered in arrival order."""
    path = os.path.join(os.environ["SIMCLUSTER_CHECK_DIR"], "rdzv-" + "".join(c if c.isalnum() else "_" for c in key))
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = len(fh.read().splitlines())
        fh.write(f"{os.getpid()}\n")
        return n


def workers(launch: Launch, env: Dict[str, str]) -> List[Dict[str, str]]:
    """The environments of the processes ``launch`` would start (just this one for python)."""
    if launch.kind == "python":
        return [dict(env)]
    ngpus = len([x for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x]) or 1
    out = []
    if launch.kind in ("torchrun", "torch.distributed.launch"):
        nproc_text = launch.opt("nproc_per_node") or "1"
        nproc = ngpus if nproc_text in ("gpu", "auto") else _int(nproc_text, 1)
        if "standalone" in launch.opts:
            nnodes, backend = 1, "c10d"
            addr, port = "localhost", "29400"
        else:
            nnodes = parse_nnodes(launch.opt("nnodes"))[1] or 1
            backend = launch.opt("rdzv_backend") or "static"
            if backend == "static":
                addr = launch.opt("master_addr") or "127.0.0.1"
                port = launch.opt("master_port") or "29500"
            else:
                endpoint = launch.opt("rdzv_endpoint") or "localhost:29400"
                addr, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "29400")
        if backend == "static":
            group = _int(launch.opt("node_rank"), 0)
        else:
            group = _rendezvous_rank(f"{env.get('SLURM_JOB_ID', '')}-{launch.opt('rdzv_id') or ''}-{addr}:{port}")
        for i in range(nproc):
            w = dict(env)
            w.update(RANK=str(group * nproc + i), LOCAL_RANK=str(i), WORLD_SIZE=str(nnodes * nproc),
                     LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(group), MASTER_ADDR=addr, MASTER_PORT=port)
            out.append(w)
        return out
    if launch.kind == "deepspeed":
        # without a hostfile the deepspeed launcher starts its workers on this node only
        nproc = _int(launch.opt("num_gpus"), ngpus)
        for i in range(nproc):
            w = dict(env)
            w.update(RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                     MASTER_ADDR=launch.opt("master_addr") or "127.0.0.1",
                     MASTER_PORT=launch.opt("master_port") or "29500")
            out.append(w)
        return out
    # accelerate launch
    total = _int(launch.opt("num_processes"), ngpus)
    machines = max(_int(launch.opt("num_machines"), 1), 1)
    per = max(total // machines, 1)
    mrank = _int(launch.opt("machine_rank"), 0)
    for i in range(per):
        w = dict(env)
        w.update(RANK=str(mrank * per + i), LOCAL_RANK=str(i), WORLD_SIZE=str(total), LOCAL_WORLD_SIZE=str(per),
                 MASTER_ADDR=launch.opt("main_process_ip") or "127.0.0.1",
                 MASTER_PORT=launch.opt("main_process_port") or "29500")
        out.append(w)
    return out


def record(tool: str, args: List[str]) -> bool:
    """Write the records of this launch; False when it is not a training launch."""
    launch = classify([tool] + args)
    if launch is None:
        return False
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    lines = []
    for i, w in enumerate(workers(launch, dict(os.environ))):
        addr = w.get("MASTER_ADDR", "")
        lines.append(json.dumps({
            "node": node, "task": os.environ.get("SLURM_PROCID"), "localid": os.environ.get("SLURM_LOCALID"),
            "step": os.environ.get("SLURM_STEP_ID"), "pid": os.getpid(), "launcher": launch.kind,
            "worker": i if launch.spawns else None, "program": launch.program,
            "env": {k: w.get(k) for k in RECORD_ENV}, "gpu": _gpu(w),
            "master_resolves": _resolves(addr) if addr else None,
            "step_gpus": os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS"),
        }))
    path = os.path.join(os.environ["SIMCLUSTER_CHECK_DIR"], "records.jsonl")
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write("\n".join(lines) + "\n")
    return True


def main(argv: List[str]) -> None:
    tool, args = argv[1], argv[2:]
    if not os.environ.get("SIMCLUSTER_CHECK_DIR"):
        _exec_real(tool, args)
    recorded = record(tool, args)
    if not recorded or os.environ.get("SIMCLUSTER_CHECK_REAL") == "1":
        _exec_real(tool, args)
    sys.exit(0)


if __name__ == "__main__":
    main(sys.argv)
