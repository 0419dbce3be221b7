"""The SSH options shared by `status --ssh` and `verify --ssh` (click decorators)."""

from __future__ import annotations

import click


def ssh_options(func):
    """Add --ssh, --ssh-key, --known-hosts and --insecure-accept-host-key to a command."""
    options = [
        click.option("--ssh", "ssh", default=None, metavar="USER@HOST[:PORT]",
                     help="Look at a cluster made by 'simcluster deploy': run on its controller over SSH."),
        click.option("--ssh-key", "ssh_key", default=None, metavar="FILE",
                     help="Private key for --ssh  [default: ssh-agent, then ~/.ssh/id_*]"),
        click.option("--known-hosts", "known_hosts", default=None, metavar="FILE",
                     help="known_hosts file for --ssh  [default: ~/.ssh/known_hosts]"),
        click.option("--insecure-accept-host-key", "insecure_host_key", is_flag=True,
                     help="--ssh: accept an unknown host key (throwaway test hosts only)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def open_session(ssh: str, ssh_key, known_hosts, insecure_host_key):
    """A connected SSHSession for the --ssh options' values."""
    from provisioner.ssh import SSHSession, parse_target
    return SSHSession(parse_target(ssh), key_file=ssh_key, known_hosts=known_hosts,
                      accept_unknown_host_key=insecure_host_key).connect()
