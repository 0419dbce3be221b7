"""A scripted controller of a deployed 2-node cluster: answers what Slurm would, no host."""

from __future__ import annotations

import base64

from provisioner.cluster.model.command_runner import Result, Runner

CONFIG = """Configuration data as of 2026-11-23T10:00:00
ClusterName             = dt1
SLURM_CONF              = /etc/slurm/slurm.conf
SlurmctldPort           = 6817
SlurmdPort              = 6818
StateSaveLocation       = /var/lib/slurm/slurmctld
TaskProlog              = /etc/slurm/task_prolog.sh
"""
NODES = ("NodeName=node1 Arch=x86_64 CPUTot=4 RealMemory=4096 State=IDLE NodeAddr=node1 Port=6818\n"
         "NodeName=node2 Arch=x86_64 CPUTot=4 RealMemory=4096 State=IDLE NodeAddr=node2\n")
GRES = "# gres.conf\nNodeName=node1 Name=gpu File=/dev/nvidia0\nNodeName=node2 Name=gpu File=/dev/nvidia1\n"


class Controller(Runner):
    """Answers like the controller of a deployed 2-node cluster with the roles' fake GPUs."""

    where = "ctl"

    def __init__(self, slurmctld_up: bool = True, files=None, node_files=None, systemd: bool = False,
                 controller_host: str = "ctl"):
        self.up = slurmctld_up
        self.systemd = systemd  # the hosts run systemd: `systemctl is-active` answers
        self.controller_host = controller_host
        self.files = {"/etc/slurm/gres.conf": GRES.encode(), **(files or {})}
        self.node_files = node_files or {}  # path -> text, as the compute nodes have it
        self.calls = []

    def run(self, argv, env=None, stdin=None, timeout=30.0, cwd=None):
        argv = list(argv)
        self.calls.append(argv)
        answer = self._answer(argv)
        if answer is None:
            return Result(argv, 1, "", f"{argv[0]}: error: Unable to contact slurm controller")
        return Result(argv, 0, answer, "")

    def _answer(self, argv):
        script = argv[argv.index("-c") + 1] if "-c" in argv else ""
        if "systemctl is-active" in script:  # host_services: `HOST UNIT STATE` lines where systemd runs
            if not self.systemd:
                return ""
            units = script.split("for u in ", 1)[1].split(";", 1)[0].split()
            # The controller's host is node1 too when the controller answers as "node1".
            hosts = ["node1", "node2"] if argv[0] == "srun" else [self.controller_host]
            return "".join(f"{h} {u} {'inactive' if (h, u) == ('node2', 'munge') else 'active'}\n"
                           for h in hosts for u in units)
        if argv[0] == "sh":
            return ""  # munge round trip, mkdir
        if argv[0] == "find":  # the config directory's files
            return "".join(f"{p.rsplit('/', 1)[1]}\n" for p in self.files if p.startswith(argv[1] + "/"))
        if argv[0] == "srun":
            script = argv[argv.index("-c") + 1]
            if "nvidia/version" in script:
                return "node1 fake\nnode2 fake\n"
            if "SIMCLUSTER_FILE" in script:
                text = self.node_files.get(argv[-1])
                return "" if text is None else f"SIMCLUSTER_FILE {base64.b64encode(text.encode()).decode()}\n"
            return ""
        if not self.up:
            return None
        return {
            ("scontrol", "show", "config"): CONFIG,
            ("scontrol", "ping"): "Slurmctld(primary) at ctl is UP\n",
            ("scontrol", "show", "nodes", "--oneliner"): NODES,
            ("scontrol", "show", "partition", "--oneliner"):
                "PartitionName=gpu AllowGroups=ALL Default=YES MaxTime=UNLIMITED Nodes=node[1-2] State=UP\n",
            ("scontrol", "show", "hostnames", "node[1-2]"): "node1\nnode2\n",
            ("sinfo", "--version"): "slurm-wlm 22.05.8\n",
        }.get(tuple(argv)) or ("node1|idle|none\nnode2|idle|none\n" if argv[0] == "sinfo" else None)

    def read_file(self, path):
        return self.files.get(path)

    def write_file(self, path, data, mode=0o644):
        self.files[path] = data
