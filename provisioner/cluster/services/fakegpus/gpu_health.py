"""The cluster's GPU health check (HealthCheckProgram), NHC-like: bin/gpu-health-check.

slurmd runs the cluster's health_check.sh (configs/templates/health_check.sh.j2) every
HealthCheckInterval seconds on each node whose state HealthCheckNodeState names; it runs
this program for its node. It asks the (fake) driver what a site's check asks NVML or DCGM
(`dcgmi health -c`): how many GPUs answer against how many the node has, the Xids they
reported, their uncorrectable ECC errors (what nvidia-smi shows: fake-gpus.json and
gpu-faults.json beside it). On a problem it drains the node as NHC does, with a reason
that names the GPU and the fault first (sinfo -R shows 20 characters):

    scontrol update nodename=node1 state=drain reason="gpu0: Xid 79 (GPU has fallen off the bus)"

and once the node is healthy again it resumes a node drained with such a reason (NHC's
own-reason rule): a drain someone else set stays.

Standard library only, as the shim it is bundled with (fakegpus/__init__.py: install).
"""

import json
import os
import re
import subprocess
import sys

if __package__:
    from .gpu_faults import FAULTS_FILE, apply_faults, node_faults, problems, read_faults
    from .nvidia_smi import DATA_FILE, gpus_of_node
else:
    from gpu_faults import FAULTS_FILE, apply_faults, node_faults, problems, read_faults
    from nvidia_smi import DATA_FILE, gpus_of_node

# The reasons this check sets, and only those: what it (and `fault heal`) may undo.
OWN_REASON = re.compile(r"^gpu\d+: (Xid \d+|lost|missing|\d+ uncorrectable ECC errors)")


def node_reason(config_dir, node):
    """The drain reason for ``node`` ("" when its GPUs are healthy)."""
    try:
        with open(os.path.join(config_dir, DATA_FILE)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return ""
    expected = int((data.get("nodes", {}).get(node) or {}).get("gpus", 0))
    faults = node_faults(read_faults(os.path.join(config_dir, FAULTS_FILE)), node)
    found = problems(expected, apply_faults(gpus_of_node(data, node), faults))
    return "; ".join(f"gpu{index}: {text}" for index, text in found)


def parse_node(text):
    """(state, reason) from `scontrol show node NODE -o`'s line: State=IDLE+DRAIN, Reason=...
    (the reason runs to " [user@time]" or the end)."""
    state = re.search(r"\bState=(\S+)", text)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*@[^\]]*\])?(?= \w+=|$)", text)
    return (state.group(1) if state else ""), (reason.group(1).strip() if reason else "")


def decide(reason_now, state, reason):
    """What to do: ("drain", reason), ("resume", "") or ("", "") for nothing.
    ``reason_now``: what the GPUs say now ("" healthy); ``state``/``reason``: the node's."""
    drained = "DRAIN" in state.upper()
    ours = bool(OWN_REASON.match(reason or ""))
    if reason_now:
        if not drained or (ours and reason != reason_now):
            return "drain", reason_now
        return "", ""  # drained already: by this check for the same, or by someone else for their reason
    if drained and ours:
        return "resume", ""
    return "", ""


def main(argv=None, env=None, run=subprocess.run):
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ) if env is None else env
    if len(argv) != 2 or argv[0] != "--config-dir":
        sys.stderr.write("usage: gpu-health-check --config-dir DIR   (the node: $SLURMD_NODENAME)\n")
        return 2
    node = env.get("SLURMD_NODENAME", "")
    if not node:
        sys.stderr.write("gpu-health-check: SLURMD_NODENAME is not set (slurmd sets it)\n")
        return 2
    reason_now = node_reason(argv[1], node)
    shown = run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, env=env)
    if shown.returncode != 0:
        sys.stderr.write(f"gpu-health-check: scontrol show node {node}: {shown.stderr.strip()}\n")
        return 1
    action, reason = decide(reason_now, *parse_node(shown.stdout))
    if action:
        update = ["scontrol", "update", f"nodename={node}", f"state={action}"] + ([f"reason={reason}"] if reason else [])
        done = run(update, capture_output=True, text=True, env=env)
        print(f"{node}: {action} {reason}".rstrip() + ("" if done.returncode == 0 else f" failed: {done.stderr.strip()}"))
        return 0 if done.returncode == 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
