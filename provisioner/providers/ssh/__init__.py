"""Clusters made by `simcluster deploy`, reached over SSH on their controller: a read-only provider.

session.py is the SSH connection (paramiko: the only place simcluster imports it),
runner.py turns it into runners (the controller; compute nodes through its srun),
cluster.py reads what the controller says the cluster is, provider.py is SSHProvider
(discover, placement, runners, liveness; provision and delete refuse: `simcluster
deploy` does those), files.py carries job files to hosts without a shared filesystem.
`status --ssh`, `export-logs --ssh` and `verify --ssh` take the Cluster open_cluster
gives and run the same code as for local and docker clusters.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from provisioner.cluster.model.handle import Cluster
from provisioner.providers.ssh.provider import SSHProvider
from provisioner.providers.ssh.session import SSHSession, parse_target


def connect(ssh: str, key_file: Optional[str] = None, known_hosts: Optional[str] = None,
            insecure_host_key: bool = False) -> SSHSession:
    """A connected session for the --ssh options' values (errors are one line, exit 1 or 2)."""
    return SSHSession(parse_target(ssh), key_file=key_file, known_hosts=known_hosts,
                      accept_unknown_host_key=insecure_host_key).connect()


@contextmanager
def open_cluster(ssh: str, key_file: Optional[str] = None, known_hosts: Optional[str] = None,
                 insecure_host_key: bool = False, probe_gpus: bool = True) -> Iterator[Cluster]:
    """The deployed cluster whose controller is ``ssh`` (USER@HOST[:PORT]), as a Cluster;
    the connection closes when the block ends. ``probe_gpus``: ask the nodes whether their
    GPUs are fake (SSHProvider)."""
    with connect(ssh, key_file, known_hosts, insecure_host_key) as session:
        provider = SSHProvider.of_session(session, probe_gpus)
        state = provider.discover("")
        assert state is not None  # a connected provider always answers (a dead controller: stopped)
        yield Cluster(state, provider)


__all__ = ["SSHProvider", "connect", "open_cluster"]
