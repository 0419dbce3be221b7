"""Accounting and REST on a deployed cluster (ansible/roles/slurm_accounting, slurm_rest):
what status reads of its MariaDB, slurmdbd and slurmrestd on the controller host, where the
roles start them with their pid files in slurm.conf's run directory, and where slurmrestd
listens (the URL file the role writes beside slurm.conf)."""

from __future__ import annotations

import posixpath
import shlex
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import Runner

ACCOUNTING_DAEMONS = ("slurmdbd", "mariadbd")
REST_URL_FILE = "slurmrestd.url"  # ansible/roles/slurm_rest/tasks/slurmrestd.yml


def pids_alive(runner: Runner, pidfiles: List[Tuple[str, str]]) -> Dict[str, bool]:
    """{daemon: its pid file names a live process} for (daemon, pid file) pairs, asked in one command."""
    script = "; ".join(f'if kill -0 "$(cat {shlex.quote(path)} 2>/dev/null)" 2>/dev/null; then echo {name}=1; '
                       f'else echo {name}=0; fi' for name, path in pidfiles)
    res = runner.run(["sh", "-c", script], timeout=20)
    seen = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
    return {name: seen.get(name) == "1" for name, _ in pidfiles}


def storage_port(runner: Runner, config: Dict[str, str]) -> Optional[int]:
    """The database port slurmdbd.conf names (beside slurm.conf; readable by root only)."""
    etc = posixpath.dirname(config.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    text = runner.read_text(posixpath.join(etc, "slurmdbd.conf")) or ""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "storageport" and value.strip().isdigit():
            return int(value.strip())
    return None


def rest_url(runner: Runner, config: Dict[str, str]) -> Optional[str]:
    """slurmrestd's URL as the role wrote it (http://ADDR:PORT); None where it wrote none."""
    etc = posixpath.dirname(config.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    text = (runner.read_text(posixpath.join(etc, REST_URL_FILE)) or "").strip()
    return text if text.startswith("http") else None
