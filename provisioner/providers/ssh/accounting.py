"""Accounting and REST on a deployed cluster (ansible/roles/slurm_accounting, slurm_rest):
what status reads of its MariaDB, slurmdbd and slurmrestd on the controller host, where the
roles start them as systemd units (systemd hosts) or with their pid files in slurm.conf's run
directory (hosts without systemd), and where slurmrestd listens (the URL file the role
writes beside slurm.conf).

The user status logs in as may be an unprivileged sudoer (a deploy with become): it cannot
signal root's or SlurmUser's daemons (``kill -0`` says EPERM) nor read MariaDB's pid file or
slurmdbd.conf (0600). What systemd says of a unit (its main pid) and a process's existence
in /proc need no privilege, so liveness is asked that way."""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Dict, List, Optional, Tuple

from provisioner.cluster.model.command_runner import Runner

ACCOUNTING_DAEMONS = ("slurmdbd", "mariadbd")
REST_URL_FILE = "slurmrestd.url"  # ansible/roles/slurm_rest/tasks/slurmrestd.yml
# The systemd unit that runs each daemon on systemd hosts (the roles' own for MariaDB and slurmrestd).
UNITS = {"slurmdbd": "slurmdbd", "mariadbd": "simcluster-mariadb", "slurmrestd": "simcluster-slurmrestd"}
MARIADB_UNIT = UNITS["mariadbd"]


def pids_alive(runner: Runner, pidfiles: List[Tuple[str, str]]) -> Dict[str, bool]:
    """{daemon: it runs} for (daemon, pid file) pairs, asked in one command: on systemd hosts
    its unit's main pid, elsewhere its pid file's, names a process in /proc."""
    def probe(name: str, path: str) -> str:
        unit = shlex.quote(UNITS.get(name, name))
        return (f'if [ -d /run/systemd/system ]; then p=$(systemctl show -P MainPID {unit} 2>/dev/null); '
                f'else p=$(cat {shlex.quote(path)} 2>/dev/null); fi; '
                f'if [ -n "$p" ] && [ "$p" != 0 ] && [ -d "/proc/$p" ]; then echo {name}=1; else echo {name}=0; fi')
    script = "; ".join(probe(name, path) for name, path in pidfiles)
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
    # Not readable (a sudoer logged in): the port MariaDB's unit starts it with, which anyone may read.
    res = runner.run(["systemctl", "show", "-P", "ExecStart", MARIADB_UNIT], timeout=20)
    found = re.search(r"--port=(\d+)", res.stdout or "") if res.ok else None
    return int(found.group(1)) if found else None


def rest_url(runner: Runner, config: Dict[str, str]) -> Optional[str]:
    """slurmrestd's URL as the role wrote it (http://ADDR:PORT); None where it wrote none."""
    etc = posixpath.dirname(config.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    text = (runner.read_text(posixpath.join(etc, REST_URL_FILE)) or "").strip()
    return text if text.startswith("http") else None
