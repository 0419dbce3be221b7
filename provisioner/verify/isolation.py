"""basic.isolation and basic.limits: the nodes are machines of their own, as in production.

A production node has its own network (two jobs on two nodes can both listen on one
port; a connection from a node comes from that node's address), finds Slurm's config at
/etc/slurm, and its cgroups enforce what a job was given (--mem, its GPU devices). The
local backend gives its nodes all that where the machine allows (root: a network
namespace and a cgroup tree per node); where it cannot, the cluster's placement says why
(``node_network``, ``node_cgroups``, ``node_etc_slurm``) and the parts that need it are
SKIP with that reason, never PASS.

Whether the nodes have their own network and enforced cgroups is decided once, in
node_facts (targets.py), from the placement's render inputs; the checks only read
the target's NodeFacts. The job scripts are written into the check's directory through
the run's job files, so they can be run again by hand; their small python programs travel
inside them (inline_python), as the nodes of a deployed cluster share no directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from provisioner.cluster.model.partitions import covering_partitions
from provisioner.verify.basic import MEM, lines_with, partition_line, training_partition
from provisioner.verify.context import Submitted, VerifyContext
from provisioner.verify.jobs import JobError
from provisioner.verify.outcome import FAIL, PASS, SKIP, CheckFailed, CheckSkipped, Outcome
from provisioner.verify.targets import NodeFacts

# The port both nodes bind: above the range simcluster gives its daemons (20000-32000,
# providers/local/ports.py) and below Linux's ephemeral ports (32768+), varied by job id.
PORT_BASE, PORT_SPAN = 32100, 600
LIMIT_MEM_MB, ALLOC_MB = 200, 600  # basic.limits: the job's --mem and what it touches


# -- parts and their verdict -----------------------------------------------------------------
@dataclass
class Part:
    name: str
    status: str
    detail: str


@dataclass
class Parts:
    items: List[Part] = field(default_factory=list)

    def add(self, name: str, status: str, detail: str) -> None:
        self.items.append(Part(name, status, detail))

    def verdict(self) -> Tuple[str, str]:
        """FAIL if any part failed, else SKIP if any was skipped (what the nodes lack is not
        proven), else PASS; with one line naming every part."""
        statuses = [p.status for p in self.items]
        status = FAIL if FAIL in statuses else SKIP if SKIP in statuses or not statuses else PASS
        order = {FAIL: 0, SKIP: 1, PASS: 2}
        shown = sorted(self.items, key=lambda p: order[p.status]) if status != PASS else self.items
        # Parts skipped for one reason share it: "a, b SKIP: <reason>".
        groups: Dict[Tuple[str, str], List[str]] = {}
        for p in shown:
            groups.setdefault((p.status, p.detail), []).append(p.name)
        text = "; ".join(f"{', '.join(names)}: {detail}" if st == PASS else f"{', '.join(names)} {st}: {detail}"
                         for (st, detail), names in groups.items())
        return status, text or "nothing to check"

    def data(self) -> Dict[str, Dict[str, str]]:
        return {p.name: {"status": p.status, "detail": p.detail} for p in self.items}


# -- the job ----------------------------------------------------------------------------------
NET_PY = r'''"""basic.isolation: run by one task per node (srun -N2 -n2)."""
import os, socket, sys, time

port, first = int(sys.argv[1]), sys.argv[2]
node, rank = os.environ.get("SLURMD_NODENAME", "?"), os.environ.get("SLURM_PROCID", "?")

# Both tasks bind 0.0.0.0:port and listen. SO_REUSEADDR as torch's store sets it: it lets
# no two listeners share an address on Linux.
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", port))
    s.listen(1)
except OSError as exc:
    print(f"BIND rank={rank} node={node} port={port} ok=0 error={exc}", flush=True)
    sys.exit(0)
start = time.time()


def bound():
    print(f"BIND rank={rank} node={node} port={port} ok=1 start={start:.3f} end={time.time():.3f}", flush=True)


# The other node connects to the first node's listener on that same port while it holds
# its own: the connection proves both held the port at once (no fixed hold, no clock
# comparison needed), and its source address is the peer-address part.
if node == first:
    s.settimeout(40)
    try:
        conn, (peer, _) = s.accept()
    except OSError as exc:
        print(f"PEER node={node} ok=0 error=no connection came: {exc}", flush=True)
        sys.exit(0)
    conn.settimeout(20)
    other = conn.recv(256).decode().strip() or "?"
    try:
        resolved = sorted({a[4][0] for a in socket.getaddrinfo(other, None, socket.AF_INET, socket.SOCK_STREAM)})
    except OSError as exc:
        resolved = [f"unresolved({exc.strerror})"]
    print(f"PEER node={node} ok=1 from_node={other} peer={peer} resolved={','.join(resolved)}", flush=True)
    conn.sendall(b"ok\n")
    conn.recv(16)  # the other closes once it has the answer: both held the port until then
    bound()
    conn.close()
else:
    deadline, last = time.time() + 30, None
    while time.time() < deadline:
        try:
            c = socket.create_connection((first, port), timeout=5)
            break
        except OSError as exc:
            last = exc
            time.sleep(0.05)
    else:
        print(f"CONNECT node={node} to={first} ok=0 error={last}", flush=True)
        sys.exit(0)
    c.settimeout(20)
    c.sendall(f"{node}\n".encode())
    c.recv(16)
    print(f"CONNECT node={node} to={first} ok=1 local={c.getsockname()[0]}", flush=True)
    bound()
    c.close()
s.close()
'''

NET_SH = """#!/bin/bash
# basic.isolation: two nodes bind one port at once; a connection between them comes from
# the connecting node's address; srun finds the config at /etc/slurm without SLURM_CONF.
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time={time}
#SBATCH --mem={mem}
{partition_line}
PY={python}
@@NET_PY@@
PORT=$(({port_base} + SLURM_JOB_ID % {port_span}))
FIRST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
echo "BATCH node=$SLURMD_NODENAME first=$FIRST port=$PORT"
if [ {net} = 1 ]; then
  srun --kill-on-bad-exit=1 -N2 -n2 "$PY" -c "$NET_PY" "$PORT" "$FIRST"
fi
if [ {etc} = 1 ]; then
  # A tool that clears SLURM_CONF: srun reads /etc/slurm/slurm.conf on the node. --quiet:
  # its errors, not its progress ("step creation temporarily disabled" on a busy host).
  out=$(env -u SLURM_CONF timeout 30 srun --quiet -N1 -n1 hostname 2>&1)
  rc=$?
  echo "ETCSLURM rc=$rc out=$(echo $out)"
fi
"""

DEV_PY = r'''"""basic.isolation: open GPU device files; print what each open() gives."""
import errno, os, sys

for arg in sys.argv[1:]:
    owner, path = arg.split("=", 1)
    try:
        os.close(os.open(path, os.O_RDWR))
        got, msg = "OK", "opened"
    except OSError as exc:
        got, msg = errno.errorcode.get(exc.errno, str(exc.errno)), exc.strerror
    print(f"DEV node={os.environ.get('SLURMD_NODENAME', '?')} owner={owner} path={path} got={got} msg={msg}",
          flush=True)
'''

DEV_SH = """#!/bin/bash
# basic.isolation: a job given one GPU opens its own device and is refused the others.
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --time={time}
#SBATCH --mem={mem}
{partition_line}
@@DEV_PY@@
srun --kill-on-bad-exit=1 {python} -c "$DEV_PY" {devices}
"""


def gpu_node(ctx: VerifyContext) -> Optional[Tuple[Optional[str], str]]:
    """(partition, node) of the first node with GPUs."""
    for part, members in covering_partitions(ctx.spec):
        for name in members:
            if ctx.spec.node(name).gpus:
                return part, name
    return None


def device_files(ctx: VerifyContext, facts: NodeFacts) -> Dict[str, List[str]]:
    """{node: its GPU device files}, as gres.conf names them."""
    return {n.name: [f"{facts.gpu_device_dir}/nvidia{g}" for g in n.gpus] for n in ctx.spec.nodes if n.gpus}


def judge_bind(text: str, nodes: Sequence[str], port: str) -> Tuple[str, str]:
    """Part a from the job's BIND lines: both nodes held 0.0.0.0:port at the same time."""
    rows = lines_with(text, "BIND")
    by_node = {r.get("node"): r for r in rows}
    missing = [n for n in nodes if n not in by_node]
    if missing:
        return FAIL, f"no answer from {', '.join(missing)}"
    refused = [f"{n}: {by_node[n].get('error', '?')}" for n in nodes if by_node[n].get("ok") != "1"]
    if refused:
        return FAIL, f"0.0.0.0:{port} could not be bound on every node at once ({'; '.join(refused)})"
    try:
        spans = [(float(by_node[n]["start"]), float(by_node[n]["end"])) for n in nodes]
    except (KeyError, ValueError):
        return FAIL, "the BIND lines carry no times"
    overlap = min(e for _, e in spans) - max(s for s, _ in spans)
    if overlap <= 0:
        # Each node's times are its own clock's. A connection made between the two on that
        # port while both held it (each prints BIND only after it) proves they held it at once
        # even where the clocks disagree (VMs' clocks drift apart by tenths of a second).
        connected = any(r.get("ok") == "1" for r in lines_with(text, "PEER")) and \
            any(r.get("ok") == "1" for r in lines_with(text, "CONNECT"))
        if connected:
            return PASS, (f"{' and '.join(nodes)} held 0.0.0.0:{port} at once (one connected to the other on it; "
                          f"their clocks differ by {-overlap:.1f} s or more)")
        return FAIL, f"both bound 0.0.0.0:{port}, but not at the same time (the tasks started {-overlap:.1f} s apart)"
    # The tasks hold the port only while one reaches the other on it: milliseconds.
    held = f"{overlap:.1f} s" if overlap >= 0.1 else f"{overlap * 1000:.0f} ms"
    return PASS, f"{' and '.join(nodes)} held 0.0.0.0:{port} at once ({held})"


def judge_peer(text: str, first: str, other: str) -> Tuple[str, str]:
    """Part b: the connection from ``other`` reached ``first`` from ``other``'s own address."""
    peer = next(iter(lines_with(text, "PEER")), None)
    conn = next(iter(lines_with(text, "CONNECT")), None)
    if conn is not None and conn.get("ok") != "1":
        return FAIL, f"{other} could not connect to {first}: {conn.get('error', '?')}"
    if peer is None:
        return FAIL, f"{first} printed no peer address"
    if peer.get("ok") != "1":
        return FAIL, f"{first}: {peer.get('error', '?')}"
    addr, resolved = peer.get("peer", "?"), [a for a in peer.get("resolved", "").split(",") if a]
    if peer.get("from_node") != other:
        return FAIL, f"{first} was reached by {peer.get('from_node')!r}, expected {other}"
    if addr not in resolved:
        return FAIL, (f"a connection from {other} reached {first} from {addr}, not from {other}'s address "
                      f"({', '.join(resolved) or 'unresolved'} in the job's hosts file)")
    return PASS, f"{other} -> {first} came from {addr} = {other}'s address"


def judge_etc_slurm(text: str, nodes: Sequence[str]) -> Tuple[str, str]:
    """Part c: `env -u SLURM_CONF srun -n1 hostname` printed a node's name."""
    row = next(iter(lines_with(text, "ETCSLURM")), None)
    if row is None:
        return FAIL, "the job printed no ETCSLURM line"
    out = row.get("out", "").strip()
    names = {n.split(".")[0] for n in out.split()}
    if row.get("rc") != "0" or len(out.split()) != 1 or not names & set(nodes):
        return FAIL, f"env -u SLURM_CONF srun -n1 hostname exited {row.get('rc')}: {out[:200]!r}"
    return PASS, f"env -u SLURM_CONF srun -n1 hostname ran on {out} (/etc/slurm/slurm.conf)"


def judge_devices(text: str, own: Sequence[str], foreign: Sequence[str], fake: bool,
                  absent_ok: bool) -> Tuple[str, str]:
    """Part d: one of ``own`` (the node's devices; the job was given one) opens, OK on a real
    GPU and ENXIO on a fake one (the devices cgroup let it through, no driver behind it); the
    rest, and every other node's (``foreign``), EPERM. ``absent_ok``: a device of another
    machine may not exist here at all (ENOENT)."""
    got = {r.get("path"): (r.get("got", "?"), r.get("msg", "")) for r in lines_with(text, "DEV")}
    missing = [p for p in [*own, *foreign] if p not in got]
    if missing:
        return FAIL, f"no answer for {', '.join(missing)}"
    allowed = "ENXIO" if fake else "OK"
    opened = [p for p in own if got[p][0] == allowed]
    problems = []
    if len(opened) != 1:
        problems.append(f"its own GPU: {', '.join(f'{p} {got[p][0]}' for p in own)} "
                        f"(expected one {allowed}{' (No such device or address)' if fake else ''})")
    denied = ("EPERM", "ENOENT") if absent_ok else ("EPERM",)
    others = [p for p in own if p not in opened] if len(opened) == 1 else []  # the node's GPUs not given
    for p in [*others, *foreign]:
        if got[p][0] not in denied:
            problems.append(f"{p}: {got[p][0]} {got[p][1]}, expected EPERM (Operation not permitted)")
    if problems:
        return FAIL, "; ".join(problems[:4])
    how = "ENXIO: let through, no driver behind a fake GPU" if fake else "opened"
    return PASS, (f"a job given one GPU opens its own {opened[0]} ({how}); "
                  f"{len(own) + len(foreign) - 1} other GPU device(s): EPERM")


def check_isolation(ctx: VerifyContext) -> Outcome:
    check = "basic.isolation"
    facts = ctx.target.nodes
    chosen = training_partition(ctx.spec, 2)
    if chosen is None:
        raise CheckSkipped("needs 2 nodes in one partition")
    part, members = chosen
    nodes = members[:2]
    parts = Parts()
    limit = ctx.limit(60)
    python = stdlib_python(ctx)

    run_net = facts.own_network
    if not run_net:
        parts.add("same port on 2 nodes", SKIP, facts.network)
        parts.add("peer address", SKIP, facts.network)
    if not facts.etc_slurm:
        parts.add("/etc/slurm", SKIP, facts.etc_slurm_note)
    net_job: Optional[Submitted] = None
    if run_net or facts.etc_slurm:
        script = NET_SH.format(time=ctx.time_minutes(limit), mem=MEM, partition_line=partition_line(part),
                               python=python, port_base=PORT_BASE, port_span=PORT_SPAN,
                               net=int(run_net), etc=int(facts.etc_slurm))
        script = inline_python(script, "NET_PY", NET_PY)
        net_job = ctx.submit(check, script, [f"--nodelist={','.join(nodes)}"], name="net.sh")

    dev_job, own, foreign = None, [], []
    found = gpu_node(ctx)
    if found is not None:
        gpart, gnode = found
        devices = device_files(ctx, facts)
        own = devices.get(gnode, [])
        foreign = [p for n, paths in devices.items() if n != gnode for p in paths]
        if not facts.devices:  # no cgroups, or cgroups that do not confine devices (rootless): limits says why
            parts.add("GPU devices", SKIP, facts.devices_note or facts.limits)
        elif len(own) + len(foreign) < 2:
            parts.add("GPU devices", SKIP, "one GPU in the cluster: no other GPU's device to be refused")
        else:
            script = DEV_SH.format(time=ctx.time_minutes(limit), mem=MEM, partition_line=partition_line(gpart),
                                   python=python,
                                   devices=" ".join(f"{'own' if p in own else 'other'}={p}" for p in [*own, *foreign]))
            script = inline_python(script, "DEV_PY", DEV_PY)
            dev_job = ctx.submit(check, script, [f"--nodelist={gnode}"], name="dev.sh")

    failed_output = None
    if net_job is not None:
        try:
            ctx.wait_ok(net_job, limit)
        except JobError as exc:
            raise CheckFailed(str(exc), output=net_job.output)
        text = ctx.read(net_job.output)
        batch = next(iter(lines_with(text, "BATCH")), {})
        first, port = batch.get("first", nodes[0]), batch.get("port", "?")
        other = next((n for n in nodes if n != first), nodes[1])
        if run_net:
            parts.add("same port on 2 nodes", *judge_bind(text, nodes, port))
            parts.add("peer address", *judge_peer(text, first, other))
        if facts.etc_slurm:
            parts.add("/etc/slurm", *judge_etc_slurm(text, nodes))
        if any(p.status == FAIL for p in parts.items):
            failed_output = net_job.output
    if dev_job is not None:
        try:
            ctx.wait_ok(dev_job, limit)
        except JobError as exc:
            raise CheckFailed(str(exc), output=dev_job.output)
        status, detail = judge_devices(ctx.read(dev_job.output), own, foreign, ctx.spec.fake_gpus,
                                       absent_ok=facts.nodes_are_hosts)
        parts.add("GPU devices", status, detail)
        if status == FAIL and failed_output is None:
            failed_output = dev_job.output

    status, text = parts.verdict()
    if status == FAIL:
        raise CheckFailed(text, output=failed_output, data={"parts": parts.data()})
    if status == SKIP:
        raise CheckSkipped(text)
    return Outcome(text, data={"parts": parts.data()})


LIMITS_PY = r'''"""basic.limits: touch more memory than the job's --mem, 50 MB at a time."""
import sys, time

total, chunk, held = int(sys.argv[1]), 50, []
start = time.time()
for done in range(chunk, total + 1, chunk):
    block = bytearray(chunk * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    held.append(block)
    print(f"TOUCHED mb={done} after={time.time() - start:.2f}", flush=True)
print(f"ALL mb={total} (the limit was not enforced)", flush=True)
'''

LIMITS_SH = """#!/bin/bash
# basic.limits: a job over its --mem ends OUT_OF_MEMORY (cgroups enforce the limit).
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --mem={mem}M
#SBATCH --time={time}
{partition_line}
@@LIMITS_PY@@
{python} -c "$LIMITS_PY" {alloc}
"""


def stdlib_python(ctx: VerifyContext) -> str:
    """The python these checks' programs (standard library only) run with, as a shell word:
    the jobs' python (the target's venv), or the node's python3 where that venv is not there
    (a cluster deployed without --training: no /opt/simcluster/venv on its hosts)."""
    venv = f"{ctx.target.python_bin}/python"
    return f'"$(if [ -x {venv} ]; then echo {venv}; else echo python3; fi)"'


def inline_python(script: str, var: str, program: str) -> str:
    """``script`` with its ``@@VAR@@`` line made a shell variable holding ``program`` (run as
    `python -c "$VAR"`): the program travels inside the batch script, so the nodes need no
    file of it (a deployed cluster's nodes share no directory with the controller)."""
    return script.replace(f"@@{var}@@", f"{var}=$(cat <<'SIMCLUSTER_PY'\n{program.strip()}\nSIMCLUSTER_PY\n)")


def memory_node(ctx: VerifyContext, mb: int) -> Optional[Tuple[Optional[str], str]]:
    for part, members in covering_partitions(ctx.spec):
        for name in members:
            if ctx.spec.node(name).memory >= mb:
                return part, name
    return None


def job_state(ctx: VerifyContext, job_id: str) -> Tuple[str, str]:
    """(JobState, RunTime) from scontrol; from sacct where slurmctld forgot the job (accounting)."""
    info = ctx.client.show_job(job_id)
    if info.get("JobState"):
        return info["JobState"], info.get("RunTime", "?")
    if getattr(ctx.spec, "accounting", False):
        proc = ctx.client.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,Elapsed"], timeout=15)
        row = (proc.stdout.strip().splitlines() or ["?|?"])[0].split("|")
        if len(row) == 2 and row[0]:
            return row[0].split()[0], row[1]
    return "?", "?"


def check_limits(ctx: VerifyContext) -> Outcome:
    check = "basic.limits"
    facts = ctx.target.nodes
    if not facts.cgroups:
        raise CheckSkipped(facts.limits)
    found = memory_node(ctx, LIMIT_MEM_MB)
    if found is None:
        raise CheckSkipped(f"no node has {LIMIT_MEM_MB} MB of memory for the job's --mem")
    part, node = found
    limit = ctx.limit(60)
    script = inline_python(LIMITS_SH.format(mem=LIMIT_MEM_MB, time=ctx.time_minutes(limit),
                                            partition_line=partition_line(part),
                                            python=stdlib_python(ctx), alloc=ALLOC_MB),
                           "LIMITS_PY", LIMITS_PY)
    t0 = time.monotonic()
    job = ctx.submit(check, script, [f"--nodelist={node}"], name="limits.sh")
    view = ctx.wait(job, limit)
    waited = time.monotonic() - t0
    state, runtime = job_state(ctx, job.job_id)
    if state in ("?", "") and view.states:
        state = view.states[0]
    touched = [r.get("mb", "?") for r in lines_with(ctx.read(job.output), "TOUCHED")]
    most = f"{touched[-1]} MB" if touched else "less than 50 MB"
    data = {"state": state, "run_time": runtime, "seconds": round(waited, 1), "touched_mb": most}
    if state != "OUT_OF_MEMORY":
        raise CheckFailed(f"a job with --mem={LIMIT_MEM_MB}M touching {ALLOC_MB} MB ended {state} after touching "
                          f"{most} (RunTime {runtime}), expected OUT_OF_MEMORY", output=job.output, data=data)
    return Outcome(f"a --mem={LIMIT_MEM_MB}M job touching {ALLOC_MB} MB on {node} ended OUT_OF_MEMORY, killed with "
                   f"{most} touched (RunTime {runtime}; {waited:.1f} s from sbatch to its end)", data=data)
