"""`export-logs` for the docker backend: the local bundle plus docker inspect and container logs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List

from provisioner import __version__
from provisioner.dockercmd import LABEL_NODE, containers, docker


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
        files = docker(["exec", cname, "sh", "-c", "cat /var/log/slurm/*.log 2>/dev/null"], check=False)
        if files.returncode == 0 and files.stdout:
            put(f"logs/{'slurmd-' + node if node else 'slurmctld'}.log", files.stdout)
    state_dir = found[0]["Config"]["Labels"].get("io.simcluster.state-dir") if found else None
    if state_dir and (Path(state_dir) / "etc").is_dir():
        for f in sorted((Path(state_dir) / "etc").iterdir()):
            if f.is_file() and f.name != "munge.key":
                (out_dir / "config").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, out_dir / "config" / f.name)
                written.append(out_dir / "config" / f.name)
    for what in ("node", "job", "partition", "config"):
        proc = docker(["exec", f"simcluster-{name}-ctl", "scontrol", "show", what], check=False)
        put(f"scontrol-show-{what}.txt", proc.stdout or proc.stderr)
    ver = docker(["version", "--format", "{{.Server.Version}}"], check=False).stdout.strip()
    slurm = docker(["exec", f"simcluster-{name}-ctl", "slurmctld", "-V"], check=False).stdout.strip()
    put("versions.txt", f"simcluster: {__version__}\ndocker: {ver}\nslurmctld: {slurm}\n")
    return written
