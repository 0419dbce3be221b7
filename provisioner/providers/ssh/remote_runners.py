"""The runners of a deployed cluster: its controller over SSH, its compute nodes through it.

SSHRunner: commands go through one SSHSession; files through its SFTP channel. The remote
command is wrapped in coreutils' `timeout`, so a command that runs too long is stopped
*there* (closing an SSH channel does not kill what it started) and comes back as rc 124
like every other runner's.

ComputeNodeRunner: a compute node, reached as a one-task srun from the controller (the
hosts need not accept SSH from here, only Slurm jobs). Neither starts daemons: the
Ansible roles' services run them.
"""

from __future__ import annotations

import base64
import shlex
from typing import List, Optional, TYPE_CHECKING

from provisioner.cluster.model.command_runner import DEFAULT_TIMEOUT, Result, Runner, ShellProcesses
from provisioner.errors import UsageError
from provisioner.providers.ssh.cluster import srun_on_nodes
from provisioner.providers.ssh.session import SSHSession

if TYPE_CHECKING:
    from provisioner.cluster.model.slurm import SlurmClient

# Seconds the SSH channel waits past the remote `timeout`: that one should fire first.
_CHANNEL_GRACE = 10.0


def remote_command(argv, env=None, cwd=None, timeout: Optional[float] = None) -> str:
    """The shell line that runs ``argv`` on the host: `cd DIR && timeout T env K=V argv...`."""
    words: List[str] = []
    if timeout:
        words += ["timeout", "-k", "5", f"{max(1, int(timeout + 0.999))}"]
    if env:
        words += ["env", *(f"{k}={v}" for k, v in env.items())]
    words += [str(a) for a in argv]
    line = " ".join(shlex.quote(w) for w in words)
    return f"cd {shlex.quote(cwd)} && {line}" if cwd else line


class SSHRunner(ShellProcesses, Runner):
    """Runs commands on ``session``'s host (as its login user, with its login environment)."""

    def __init__(self, session: SSHSession):
        self.session = session
        self.where = str(session.target.host)

    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        argv = [str(a) for a in argv]
        res = self.session.run_shell(remote_command(argv, env, cwd, timeout), timeout=timeout + _CHANNEL_GRACE,
                                     stdin=stdin)
        res.argv = argv
        if res.rc == 124 and not res.stderr:
            res.stderr = f"{argv[0]} did not finish within {timeout:.0f}s on {self.where}"
        return res

    def start_daemon(self, argv, log_path, env=None) -> int:
        # Deployed clusters' daemons are systemd services (or simcluster-daemon's) made by
        # the Ansible roles; simcluster never starts one over SSH.
        raise UsageError(f"starting daemons over SSH is not supported ({self.where}): 'simcluster deploy' does that")

    def read_file(self, path) -> Optional[bytes]:
        return self.session.read_bytes(str(path))

    def write_file(self, path, data, mode=0o644) -> None:
        self.session.write_bytes(str(path), data, mode)

    def exec_prefix(self, cwd, interactive) -> List[str]:
        t = self.session.target
        argv = ["ssh", *(["-t"] if interactive else []), "-p", str(t.port)]
        if self.session.key_file:
            argv += ["-i", self.session.key_file]
        if self.session.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.session.known_hosts}"]
        argv.append(f"{t.user}@{t.host}")
        return argv + (["cd", shlex.quote(cwd), "&&"] if cwd else [])


class ComputeNodeRunner(ShellProcesses, Runner):
    """Compute node ``node``, reached with one-task sruns in partition ``part`` through the
    controller's ``client`` (commands run as the job's user, in a job's environment)."""

    process_timeout = 30.0  # an srun round trip through the controller

    def __init__(self, client: "SlurmClient", part: Optional[str], node: str, where: Optional[str] = None):
        self.client, self.part, self.node = client, part, node
        self.where = where or node

    def run(self, argv, env=None, stdin=None, timeout=DEFAULT_TIMEOUT, cwd=None) -> Result:
        argv = [str(a) for a in argv]
        if env or cwd:
            argv = ["sh", "-c", remote_command(argv, env, cwd)]
        return srun_on_nodes(self.client, self.part, [self.node], argv, stdin=stdin, timeout=timeout)

    def start_daemon(self, argv, log_path, env=None) -> int:
        raise UsageError(f"starting daemons on {self.node} is not supported: 'simcluster deploy' does that")

    def read_file(self, path) -> Optional[bytes]:
        res = self.run(["sh", "-c", 'test -r "$1" && base64 -w0 "$1"', "sh", str(path)], timeout=60)
        if not res.ok:
            return None
        try:
            return base64.b64decode(res.stdout.strip())
        except ValueError:
            return None

    def write_file(self, path, data, mode=0o644) -> None:
        script = 'base64 -d > "$1" && chmod "$2" "$1"'
        res = self.run(["sh", "-c", script, "sh", str(path), f"{mode:o}"],
                       stdin=base64.b64encode(data).decode() + "\n", timeout=60)
        if not res.ok:
            raise UsageError(f"writing {path} on {self.node} failed: {res.error_line()}")

    def exec_prefix(self, cwd, interactive) -> List[str]:
        raise UsageError(f"no shell on compute node {self.node} from here: run commands through the controller "
                         "(its srun reaches the nodes)")
