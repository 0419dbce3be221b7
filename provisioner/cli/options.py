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
    (("--mig",), "mig", dict(metavar="PROFILE:N,...",
                             help="Fake GPUs: cut every GPU into MIG instances, e.g. '3g.40gb:2' or "
                                  "'3g.40gb:1,2g.20gb:1,1g.10gb:2' (profiles of the GPU type; docs/gpus.md).")),
    (("--shards",), "shards", dict(type=int, metavar="N",
                                   help="Fake GPUs: N Slurm shards per GPU (--gres=shard:K; docs/gpus.md).")),
    (("--mps",), "mps", dict(type=int, metavar="N",
                             help="Fake GPUs: an MPS share of N per GPU (--gres=mps:K; docs/gpus.md).")),
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
    (("--rest",), "rest", dict(is_flag=True, default=None,
                               help="Add slurmrestd with JWT auth: Slurm's REST API, tokens from 'simcluster "
                                    "token' (docs/rest.md).")),
    (("--metrics",), "metrics", dict(is_flag=True, default=None,
                                     help="Add a Prometheus exporter (local and docker backends): Slurm's nodes, partitions, "
                                          "jobs, sdiag and the fake GPUs as DCGM series, on 127.0.0.1; its URL "
                                          "in 'simcluster env' (docs/metrics.md).")),
    (("--users",), "users", dict(metavar="USER,...",
                                 help="Local users of this host who use the cluster (root's clusters): each must "
                                      "exist (useradd --create-home NAME first); with --accounting each gets an "
                                      "account of their own (docs/users.md).")),
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
# A production slurm.conf as the spec (docs/like.md): instead of --config, the other flags over it.
_LIKE_FLAGS = (
    (("--like",), "like_path", dict(metavar="SLURM_CONF",
                                    help="Mirror a production slurm.conf (and its includes): partitions, node names "
                                         "and shapes, typed GPUs, features, accounts, QoS (docs/like.md).")),
    (("--gres-conf",), "gres_conf", dict(metavar="FILE", help="--like: the production gres.conf  [default: "
                                                               "gres.conf beside the slurm.conf, if any]")),
    (("--max-nodes",), "max_nodes", dict(type=int, metavar="N",
                                         help="--like: keep at most N nodes, every partition keeping a node of "
                                              "each of its shapes.")),
)
LIKE_KEYWORDS = tuple(k for _, k, _ in _LIKE_FLAGS)
# What a mirrored conf says itself: these flags do not combine with --like.
_NOT_WITH_LIKE = {"config_path": "--config", "nodes": "--nodes", "cpus": "--cpus", "memory": "--memory"}


def spec_options(only=SPEC_KEYWORDS + LIKE_KEYWORDS):
    """Add the spec flags (and the --like flags) named in ``only`` (keywords) to a command."""
    def decorate(func):
        for flags, key, kwargs in reversed(_SPEC_FLAGS + _LIKE_FLAGS):
            if key in only:
                func = click.option(*flags, key, **{"default": None, **kwargs})(func)
        return func
    return decorate


def load_spec_from_options(name: Optional[str], options: Dict, say=None):
    """The ClusterSpec the spec flags describe (the YAML of --config, or the mirror of --like,
    with the flags over it). A mirror's one-line report goes to ``say`` (default: stdout);
    with -v, the full report."""
    spec, report = load_spec_and_report(name, options)
    if report is not None:
        (say or click.echo)(report_text(report))
    return spec


def report_text(report) -> str:
    """A --like report as the user asked for it: one summary line, every setting with -v."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx else None
    return report.text().rstrip() if obj and obj.get("verbose") else report.summary()


def load_spec_and_report(name: Optional[str], options: Dict):
    """(ClusterSpec, the --like report or None) of the spec flags."""
    # lazy: the spec loader (YAML, validation) and the conf reader load when a command runs, not for --help
    from provisioner.config import load_spec
    from provisioner.config.overrides import fake_gpus_value, spec_overrides
    from provisioner.errors import UsageError
    choices = {key: options.get(key) for key in SPEC_KEYWORDS if key != "config_path"}
    like = options.get("like_path")
    if not like:
        for key in ("gres_conf", "max_nodes"):
            if options.get(key) is not None:
                flag = "--" + key.replace("_", "-")
                raise UsageError(f"{flag} only goes with --like", f"simcluster up --like prod/slurm.conf {flag} ...")
        return load_spec(options.get("config_path"), spec_overrides(name=name, **choices)), None
    for key, flag in _NOT_WITH_LIKE.items():
        if options.get(key) is not None:
            hint = ("use --max-nodes N to keep fewer nodes" if key == "nodes" else
                    "write the mirror with 'simcluster render --like F --out DIR', edit its like-spec.yaml, "
                    "then 'up --config' it" if key == "config_path" else "edit the shapes in a copy of the conf")
            raise UsageError(f"{flag} does not combine with --like: the conf says the cluster's nodes and shapes",
                             hint)
    fake = fake_gpus_value(choices.pop("fake_gpus", None))
    if isinstance(fake, int) and not isinstance(fake, bool):
        raise UsageError(f"--fake-gpus {fake}: with --like the conf says how many GPUs each node has",
                         "use --fake-gpus alone (fake the --gpus ids), or leave it out (fake GPUs by default)")
    host_gpus = None
    if choices.get("gpus") is not None:
        from provisioner.config.parse import parse_gpu_list
        try:
            host_gpus = parse_gpu_list(choices["gpus"])
        except ValueError as exc:
            raise UsageError(f"--gpus: {exc}") from None
    for key in ("gpus", "nodes", "cpus", "memory"):
        choices.pop(key, None)
    overrides = spec_overrides(name=name, **choices)
    if fake:
        overrides["fakeGpus"] = True
    from provisioner.like import like_spec
    return like_spec(like, gres_conf=options.get("gres_conf"), max_nodes=options.get("max_nodes"),
                     gpus=host_gpus, overrides=overrides)


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
    """The Cluster that --name and the ssh_options name (provisioner.named_clusters.open_cluster:
    a cluster of this machine, or a deployed one over SSH), for a ``with`` block."""
    from provisioner.named_clusters import open_cluster  # lazy: the cluster model loads when a command runs, not for --help
    return open_cluster(name, **where)
