"""`simcluster status --ssh`: the status of a deployed cluster, read on its controller.

Gives the same dictionary as the local and docker backends' status(), so the table and
--json output are the same: nodes and states from sinfo, shapes from `scontrol show nodes`,
GPU ids from gres.conf, slurmctld from `scontrol ping`, munge from a munge/unmunge round trip.
"""

from __future__ import annotations

import re
from typing import Dict, List

from provisioner.slurm import SINFO_NODE_ARGS, parse_sinfo
from provisioner.ssh import SSHSession

_PAIR_RE = re.compile(r"(\w+)=(.*?)(?=\s\w+=|$)")


def parse_scontrol_oneliner(text: str) -> List[Dict[str, str]]:
    """`scontrol show nodes --oneliner` -> one {Key: value} dict per node."""
    return [dict(_PAIR_RE.findall(line.strip())) for line in text.splitlines() if line.startswith("NodeName=")]


def parse_gres_conf(text: str) -> Dict[str, List[int]]:
    """{node: [gpu ids]} from gres.conf lines 'NodeName=n Name=gpu File=/dev/nvidiaN'."""
    gpus: Dict[str, List[int]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*NodeName=(\S+)\s+Name=gpu\s+File=\S*?nvidia(\d+)\s*$", line)
        if m:
            gpus.setdefault(m.group(1), []).append(int(m.group(2)))
    return gpus


def _int(value) -> object:
    return int(value) if value and str(value).isdigit() else None


def remote_status(session: SSHSession) -> Dict:
    config = session.run(["scontrol", "show", "config"], timeout=20)
    conf = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", config.stdout, re.M))
    ping = session.run(["scontrol", "ping"], timeout=20)
    responding = ping.rc == 0 and "UP" in ping.stdout
    munge = session.run_shell("munge -n | unmunge >/dev/null", timeout=20)
    sinfo = session.run(SINFO_NODE_ARGS, timeout=20)
    states = parse_sinfo(sinfo.stdout) if sinfo.rc == 0 else None
    shown = parse_scontrol_oneliner(session.run(["scontrol", "show", "nodes", "--oneliner"], timeout=20).stdout)
    gres_path = f"{conf.get('SLURM_CONF', '/etc/slurm/slurm.conf').rsplit('/', 1)[0]}/gres.conf"
    gpus = parse_gres_conf(session.run(["cat", gres_path], timeout=20).stdout)

    nodes = []
    for info in shown:
        name = info["NodeName"]
        ns = (states or {}).get(name)
        state = ns.state if ns else info.get("State", "unknown").lower()
        nodes.append({"name": name, "state": state, "reason": ns.reason if ns else info.get("Reason", ""),
                      "ready": bool(ns and ns.ready), "gpus": gpus.get(name, []),
                      "slurmd_alive": bool(ns) and not ns.state.endswith("*") and "down" not in ns.state,
                      "cpus": _int(info.get("CPUTot")), "memory_mb": _int(info.get("RealMemory")),
                      "port": _int(info.get("Port")) or 6818, "host": info.get("NodeAddr", "")})
    healthy = responding and munge.rc == 0 and states is not None and bool(nodes) and all(n["ready"] for n in nodes)
    return {"name": conf.get("ClusterName", "?"), "backend": "ssh", "phase": "running" if responding else "stopped",
            "healthy": healthy, "fake_gpus": False, "state_dir": f"{session.target} ({conf.get('SLURM_CONF', '?')})",
            "controller": {"port": _int(conf.get("SlurmctldPort")) or 6817, "alive": responding,
                           "responding": responding, "host": session.target.host},
            "munged": {"alive": munge.rc == 0}, "nodes": nodes}
