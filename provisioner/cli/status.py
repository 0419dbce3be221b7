"""`simcluster status`: nodes, states, GPUs, daemons; exit 1 when unhealthy."""

from __future__ import annotations

import time

import click

from provisioner.cli.common import echo_json, name_option
from provisioner.cli.options import cluster_from_options, ssh_options

# One line each where the status has it: (key of status --json, what the line says).
FACTS = (("node_etc_slurm", "/etc/slurm on the nodes"), ("node_network", "network of the nodes"),
         ("node_cgroups", "limits (cgroups)"), ("node_boot_time", "boot time of the nodes"),
         ("containers", "container options"))


def _fmt_mem(mb) -> str:
    if mb is None:
        return "-"
    return f"{mb // 1024}G" if mb >= 10240 and mb % 1024 == 0 else f"{mb}M"


@click.command("status")
@name_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@ssh_options
@click.pass_context
def command(ctx, name, as_json, **where):
    """Show a cluster's nodes (state, GPUs, CPUs, memory) and whether its daemons live.

    With --ssh USER@HOST, the cluster is one made by 'simcluster deploy', read on its controller.
    Exits 0 when every daemon runs and every node is ready, 1 otherwise.
    """
    from provisioner.cluster.inspect.status import cluster_status  # lazy: the cluster model loads when the command runs, not for --help
    with cluster_from_options(name, **where) as cluster:
        st = cluster_status(cluster).to_dict()
    if as_json:
        echo_json(st)
    else:
        alive = lambda ok: "alive" if ok else "DEAD"
        c = st["controller"]
        click.echo(f"cluster {st['name']} ({st['backend']}"
                   f"{', Slurm ' + st['slurm_version'] if st.get('slurm_version') else ''}): "
                   f"{'healthy' if st['healthy'] else 'UNHEALTHY'}  [{st['phase']}]")
        click.echo(f"  slurmctld {alive(c['alive'])} on {c['host']} port {c['port']}"
                   f"{'' if c['responding'] or not c['alive'] else ' (not responding)'};"
                   f"  munged {alive(st['munged']['alive'])}")
        services = []  # (what, healthy, how it is): the optional daemons the cluster has
        acct, api = st.get("accounting") or {}, st.get("rest") or {}
        if acct.get("enabled"):
            services.append(("accounting", acct["healthy"],
                             f"slurmdbd {alive(acct['slurmdbd']['alive'])} on port {acct['slurmdbd']['port']};"
                             f"  MariaDB {alive(acct['mariadb']['alive'])} on port {acct['mariadb']['port']};"
                             f"  cluster {'registered' if acct['registered'] else 'NOT registered'}"))
        if api.get("enabled"):
            answered = ", ".join(api["versions"]) or "none answered" + (f" ({api['error']})" if api.get("error") else "")
            services.append(("REST API", api["healthy"], f"slurmrestd {alive(api['alive'])} at {api['url'] or '?'}; "
                                                         f"API versions {answered}"))
        exporter = st.get("metrics") or {}
        if exporter.get("enabled"):
            services.append(("metrics", exporter["healthy"], f"exporter {alive(exporter['alive'])} at "
                                                             f"{exporter['url']} (docs/metrics.md)"))
        for what, healthy, how in services:
            click.echo(f"  {what} {'healthy' if healthy else 'UNHEALTHY'}: {how}")
        click.echo(f"  state: {st['state_dir']}")
        if st.get("shared_dir"):
            click.echo(f"  job files: {st['shared_dir']} (shared with every node)")
        for key, label in FACTS:
            if st.get(key):
                click.echo(f"  {label}: {st[key]}")
        for host, units in (st.get("services") or {}).items():
            click.echo(f"  services on {host} (systemd): " + ", ".join(f"{u} {s}" for u, s in units.items()))
        gpu_hdr = "GPUS(fake)" if st["fake_gpus"] else "GPUS"
        click.echo(f"  {'NODE':<14} {'STATE':<12} {'CPUS':>5} {'MEMORY':>8}  {gpu_hdr:<10} {'PORT':>5}  SLURMD  REASON")
        for n in st["nodes"]:
            gpus = ",".join(map(str, n["gpus"])) or "-"
            click.echo(f"  {n['name']:<14} {n['state']:<12} {n['cpus'] or '-':>5} {_fmt_mem(n['memory_mb']):>8}  "
                       f"{gpus:<10} {n['port'] or '-':>5}  {alive(n['slurmd_alive']):<6}  "
                       f"{n['reason']}{' [' + n['problem'] + ']' if n.get('problem') else ''}")
        for f in st.get("faults") or []:
            click.echo(f"  fault: {f['what']}{' ' + f['node'] if f.get('node') else ''}"
                       f"{' (' + f['reason'] + ')' if f.get('reason') else ''} since "
                       f"{time.strftime('%H:%M:%S', time.localtime(f['since']))}")
        for h in st.get("hints") or []:
            click.echo(f"  hint: {h}")
    ctx.exit(0 if st["healthy"] else 1)
