"""Before Ansible runs: can every host's SSH port be reached at all?

Ansible would find out too, but only after other hosts were half-configured (and the
last step would wait for nodes that never come); a TCP connect per host takes a second.
"""

from __future__ import annotations

import errno
import shlex
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

from provisioner.deploy.inventory import Host
from provisioner.providers.ssh.session import HostUnreachable


def _probe(host: Host, timeout: float) -> Optional[str]:
    where = f"{host.address}:{host.port}"
    if host.vars.get("ansible_connection") == "local":
        return None
    try:
        with socket.create_connection((host.address, host.port), timeout=timeout):
            return None
    except socket.gaierror:
        return f"cannot reach host {host.name} ({where}): the address does not resolve"
    except socket.timeout:
        return f"cannot reach host {host.name} ({where}): no answer within {timeout:.0f}s"
    except OSError as exc:
        reason = "connection refused" if exc.errno == errno.ECONNREFUSED else (exc.strerror or str(exc))
        return f"cannot reach host {host.name} ({where}): {reason}"


def check_reachable(hosts: List[Host], timeout: float = 5.0) -> None:
    """Raise HostUnreachable naming the first host whose SSH port does not answer."""
    with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
        problems = [p for p in pool.map(lambda h: _probe(h, timeout), hosts) if p]
    if problems:
        raise HostUnreachable(problems[0], "is the host up and sshd listening? (ansible_host/ansible_port in the inventory)",
                              details="\n".join(f"  - {p}" for p in problems[1:]))


# Ansible's words when, with pipelining, ssh had exited (a refused key, say) before Ansible
# wrote to it: the reason ssh printed is lost.
HIDDEN_SSH_REASON = ("Data could not be sent to remote host", "Broken pipe")


def ssh_reason(host: Host, timeout: float = 15.0) -> Optional[str]:
    """Why ssh cannot log in to ``host`` with the inventory's user, key and ssh args, as
    ssh itself says it ("root@h: Permission denied (publickey)."); None if it can."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(timeout)}", "-p", str(host.port)]
    key = host.vars.get("ansible_ssh_private_key_file") or host.vars.get("ansible_private_key_file")
    if key:
        argv += ["-i", str(key)]
    argv += shlex.split(str(host.vars.get("ansible_ssh_common_args", "")))
    user = host.vars.get("ansible_user")
    argv += [f"{user}@{host.address}" if user else host.address, "true"]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=timeout + 5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    return lines[-1] if proc.returncode == 255 and lines else None
