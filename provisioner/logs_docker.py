"""`export-logs` for the docker backend: the local bundle plus docker inspect and container logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from provisioner import __version__
from provisioner.dockercmd import LABEL_NODE, containers, docker, labelled_spec
from provisioner.logs import copy_files


def export_docker_logs(provider, name: str, out_dir: Path) -> List[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []

    def put(rel: str, text: str) -> None:
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    found = containers(name)
    put("docker-inspect.json", json.dumps(found, indent=2))
    for c in found:
        cname = c["Name"].lstrip("/")
        logs = docker(["logs", cname], check=False)
        put(f"containers/{cname}.log", logs.stdout + logs.stderr)
        node = c["Config"]["Labels"].get(LABEL_NODE)
        # Each daemon's own log files, one directory per container (the controller's holds
        # slurmctld.log, and slurmdbd.log + mariadbd.log on accounting clusters).
        dest = out_dir / "logs" / (node or "controller")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if docker(["cp", f"{cname}:/var/log/slurm/.", str(dest)], check=False).returncode == 0:
            written.extend(p for p in dest.rglob("*") if p.is_file())
    state_dir = found[0]["Config"]["Labels"].get("io.simcluster.state-dir") if found else None
    if state_dir:
        written += copy_files(Path(state_dir) / "etc", out_dir / "config", skip=("munge.key",))
    for what in ("node", "job", "partition", "config"):
        proc = docker(["exec", f"simcluster-{name}-ctl", "scontrol", "show", what], check=False)
        put(f"scontrol-show-{what}.txt", proc.stdout or proc.stderr)
    if any(labelled_spec(c).get("accounting") for c in found):
        from provisioner.actions.accounting import DEBUG_REPORTS, report_text
        for rel, argv in DEBUG_REPORTS:
            put(rel, report_text(docker(["exec", f"simcluster-{name}-ctl", *argv], check=False)))
    ver = docker(["version", "--format", "{{.Server.Version}}"], check=False).stdout.strip()
    slurm = docker(["exec", f"simcluster-{name}-ctl", "slurmctld", "-V"], check=False).stdout.strip()
    put("versions.txt", f"simcluster: {__version__}\ndocker: {ver}\nslurmctld: {slurm}\n")
    return written
