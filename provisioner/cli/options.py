"""Options shared by several commands, defined once: the spec flags (up, test, render) and
the options that name an existing cluster (--name, or --ssh and its key options) for
status, verify and export-logs (cluster_from_options)."""

from __future__ import annotations

from typing import Dict, Optional

import click

# (flags, keyword, click kwargs); the keyword is the argument of
# provisioner.config.overrides.spec_overrides (which maps it to the YAML key), except config_path.
_SPEC_FLAGS = (
    (("--nodes", "-N"), "nodes", dict(type=int, metavar="K", help="Number of virtual nodes  [default: 2]")),
    (("--gpus",), "gpus", dict(metavar="IDS", help="Physical GPU ids given to nodes in order, evenly: '6,7', '0-3'.")),
    (("--fake-gpus",), "fake_gpus", dict(is_flag=False, flag_value="all", metavar="[K]",
                                         help="Simulate GPUs (no GPU needed): alone, fake the --gpus list; "
                                              "with K, fake K GPUs (ids 0..K-1).")),
    (("--cpus",), "cpus", dict(type=int, metavar="C", help="CPUs each node advertises  [default: host's]")),
    (("--memory",), "memory", dict(metavar="M", help="Memory each node advertises: MB or 240G  [default: host's]")),
    (("--backend",), "backend", dict(metavar="local|docker",
                                     help="local: processes on this host; docker: a container per node  "
                                          "[default: local, or the config's backend]")),
    (("--image",), "image", dict(metavar="IMAGE", help="docker backend: node image, used as it is  [default: the "
                                                       "-train image when built, else the basic one; rebuilt when "
                                                       "made from older build files]")),
    (("--privileged",), "privileged", dict(is_flag=True, default=None,
                                           help="docker backend: run containers --privileged.")),
    (("--accounting",), "accounting", dict(is_flag=True, default=None,
                                           help="Add slurmdbd with a private MariaDB: sacct, sacctmgr, sshare "
                                                "and fair-share work.")),
    (("--fast-failure",), "fast_failure", dict(is_flag=True, default=None,
                                               help="Detect dead nodes fast: SlurmdTimeout=5, MessageTimeout=3, a killed "
                                                    "node is DOWN in ~12 s (failureDetection: fast; see docs/faults.md).")),
    (("--slurm",), "slurm", dict(metavar="22.05|24.11|26.05",
                                 help="Slurm release: docker builds its image from Debian (bookworm, trixie, sid); "
                                      "local runs this host's Slurm only  [default: docker 22.05, local the host's]")),
    (("--config", "-c"), "config_path", dict(metavar="FILE", help="Cluster spec YAML (apiVersion: simcluster/v1); "
                                                                  "flags override it.")),
    (("--wait",), "wait", dict(type=float, metavar="SECONDS",
                               help="How long to wait for all nodes to be idle  [default: 60]")),
)
SPEC_KEYWORDS = tuple(k for _, k, _ in _SPEC_FLAGS)


def spec_options(only=SPEC_KEYWORDS):
    """Add the spec flags named in ``only`` (keywords) to a command."""
    def decorate(func):
        for flags, key, kwargs in reversed(_SPEC_FLAGS):
            if key in only:
                func = click.option(*flags, key, **{"default": None, **kwargs})(func)
        return func
    return decorate


def load_spec_from_options(name: Optional[str], options: Dict):
    """The ClusterSpec the spec flags describe (the YAML of --config, with the flags over it)."""
    # lazy: the spec loader (YAML, validation) loads when a command runs, not for --help
    from provisioner.config import load_spec
    from provisioner.config.overrides import spec_overrides
    choices = {key: options.get(key) for key in SPEC_KEYWORDS if key != "config_path"}
    return load_spec(options.get("config_path"), spec_overrides(name=name, **choices))


# `status`, `verify` and `export-logs` --ssh: a cluster made by `simcluster deploy`, reached on
# its controller.
_SSH_FLAGS = (
    (("--ssh",), "ssh", dict(default=None, metavar="USER@HOST[:PORT]",
                             help="Look at a cluster made by 'simcluster deploy': run on its controller over SSH.")),
    (("--ssh-key",), "ssh_key", dict(default=None, metavar="FILE",
                                     help="Private key for --ssh  [default: ssh-agent, then ~/.ssh/id_*]")),
    (("--known-hosts",), "known_hosts", dict(default=None, metavar="FILE",
                                             help="known_hosts file for --ssh  [default: ~/.ssh/known_hosts]")),
    (("--insecure-accept-host-key",), "insecure_host_key",
     dict(is_flag=True, help="--ssh: accept an unknown host key (throwaway test hosts only).")),
)


def ssh_options(func):
    """Add --ssh, --ssh-key, --known-hosts and --insecure-accept-host-key to a command; pass
    their values on to cluster_from_options (as ``**where``)."""
    for flags, key, kwargs in reversed(_SSH_FLAGS):
        func = click.option(*flags, key, **kwargs)(func)
    return func


def cluster_from_options(name: str, **where):
    """The Cluster that --name and the ssh_options name (provisioner.clusters.open_cluster:
    a cluster of this machine, or a deployed one over SSH), for a ``with`` block."""
    from provisioner.clusters import open_cluster  # lazy: the cluster model loads when a command runs, not for --help
    return open_cluster(name, **where)
