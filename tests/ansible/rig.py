"""Throwaway "real hosts" for the deploy tests: docker containers that run only sshd.

Each host starts from the bare offline Debian base plus openssh-server and python3
(tests/ansible/hosts/Dockerfile), accepts a key pair made for this run, and publishes its
port 22 on 127.0.0.1 only. Hosts share a private network on which their inventory names
resolve (what DNS does on a real cluster). Everything carries the label
io.simcluster.deploy-test=<run id>, so remove() finds it all, even after a crash.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
IMAGE = "simcluster-test/sshhost:bookworm"
LABEL = "io.simcluster.deploy-test"


def docker(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])} failed: {proc.stderr.strip()}")
    return proc


def build_image() -> str:
    """The host image, FROM the offline base (bootstrapped with debootstrap if missing)."""
    sys.path.insert(0, str(REPO))
    from provisioner.providers.docker.image import ensure_base
    base = ensure_base(lambda m: print(m, file=sys.stderr))
    docker("build", "-q", "--build-arg", f"BASE={base}", "-t", IMAGE, str(REPO / "tests" / "ansible" / "hosts"),
           timeout=900)
    return IMAGE


@dataclass
class Rig:
    """A set of sshd containers, their key, known_hosts and an inventory for them."""

    run_id: str
    workdir: Path
    hosts: Dict[str, int] = field(default_factory=dict)  # name -> published ssh port

    @property
    def network(self) -> str:
        return f"sc-deploytest-{self.run_id}"

    def container(self, host: str) -> str:
        return f"sc-deploytest-{self.run_id}-{host}"

    @property
    def key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    def start(self, names: List[str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"deploytest-{self.run_id}",
                        "-f", str(self.key)], check=True)
        pub = (self.workdir / "id_ed25519.pub").read_text().strip()
        docker("network", "create", "--label", f"{LABEL}={self.run_id}", self.network)
        for name in names:
            docker("run", "-d", "--init", "--name", self.container(name), "--hostname", name,
                   "--network", self.network, "--network-alias", name, "-p", "127.0.0.1::22",
                   "--label", f"{LABEL}={self.run_id}", "-e", f"AUTHORIZED_KEY={pub}", IMAGE)
        for name in names:
            port = docker("port", self.container(name), "22").stdout.split()[0].rsplit(":", 1)[1]
            self.hosts[name] = int(port)
        lines = []
        for name, port in self.hosts.items():
            self._wait_sshd(port)
            keys = docker("exec", self.container(name), "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub").stdout
            lines += [f"[127.0.0.1]:{port} {' '.join(k.split()[:2])}" for k in keys.splitlines() if k.strip()]
        self.known_hosts.write_text("\n".join(lines) + "\n")

    @staticmethod
    def _wait_sshd(port: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on 127.0.0.1:{port} did not answer within {timeout:.0f}s")
            time.sleep(0.2)

    def inventory(self, controller: str, compute: List[str], extra_host_vars: Dict[str, str] = None,
                  path: Path = None, cluster: str = None) -> Path:
        """Write an INI inventory for these hosts; return its path."""
        extra = extra_host_vars or {}

        def line(h: str) -> str:
            return f"{h} ansible_host=127.0.0.1 ansible_port={self.hosts[h]} {extra.get(h, '')}".rstrip()

        text = "\n".join([
            "[controller]", line(controller), "",
            "[compute]", *[line(h) for h in compute], "",
            "[all:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={self.key}",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={self.known_hosts} -o IdentitiesOnly=yes'",
            "ansible_python_interpreter=/usr/bin/python3",
            f"slurm_cluster_name={cluster or 'dt' + self.run_id}", ""])
        path = path or self.workdir / "inventory.ini"
        path.write_text(text)
        return path

    def remove(self) -> List[str]:
        """Delete every container and network of this run and the work dir; return what was left before."""
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}={self.run_id}", check=False).stdout.split()
        if ids:
            docker("rm", "-f", "-v", *ids, check=False)
        nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}={self.run_id}", check=False).stdout.split()
        if nets:
            docker("network", "rm", *nets, check=False)
        shutil.rmtree(self.workdir, ignore_errors=True)
        return ids + nets

    def leftovers(self) -> List[str]:
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}={self.run_id}", check=False).stdout.split()
        nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}={self.run_id}", check=False).stdout.split()
        return ids + nets
