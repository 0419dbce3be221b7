"""Clusters made by `simcluster deploy`, reached over SSH on their controller.

session.py is the SSH connection (paramiko: the only place simcluster imports it),
runner.py turns it into a Runner, cluster.py reads what the controller says the cluster
is, status.py builds `status --ssh`'s ClusterStatus, files.py carries verify's job files
to hosts without a shared filesystem, target.py is `verify --ssh`'s VerifyTarget.
"""

from __future__ import annotations

from typing import Optional

from provisioner.providers.ssh.session import SSHSession, parse_target


def connect(ssh: str, key_file: Optional[str] = None, known_hosts: Optional[str] = None,
            insecure_host_key: bool = False) -> SSHSession:
    """A connected session for the --ssh options' values (errors are one line, exit 1 or 2)."""
    return SSHSession(parse_target(ssh), key_file=key_file, known_hosts=known_hosts,
                      accept_unknown_host_key=insecure_host_key).connect()
