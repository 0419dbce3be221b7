"""`simcluster check SCRIPT...`: multi-node bugs of batch scripts, before they burn GPU hours."""

from __future__ import annotations

import click

from provisioner.cli.common import echo_json
from provisioner.errors import UsageError


@click.command("check")
@click.argument("scripts", nargs=-1, required=True, metavar="SCRIPT...")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--run", "run", is_flag=True,
              help="Also run the script on a throwaway local cluster shaped by its #SBATCH header, with "
                   "python/torchrun/deepspeed/accelerate replaced by a recorder, and report rank collisions.")
@click.option("--real", is_flag=True, help="With --run: run the real commands (the recorder still records).")
@click.option("--no-shellcheck", is_flag=True, help="Leave ShellCheck's findings out.")
@click.option("--nodes", "-N", "nodes", type=click.IntRange(1, 100000), default=None, metavar="N",
              help="The node count the job is submitted with (sbatch -N N), over the header's --nodes. "
                   "Without it, a script with no --nodes that is clearly multi-node is checked as if "
                   "submitted with -N 2 or more.")
@click.option("--strict", is_flag=True,
              help="Exit 1 on any finding, ShellCheck's and warnings included (by default only "
                   "multi-node errors decide the exit status); notes never do.")
@click.option("--timeout", type=float, default=120.0, show_default=True, metavar="SECONDS",
              help="With --run: how long the job may take.")
@click.option("--like", "like", metavar="PATH", default=None,
              help="Judge the #SBATCH header against the cluster this production slurm.conf describes "
                   "(partitions, MaxTime, MaxNodes, typed GPUs, features, node shapes, accounts, QoS); "
                   "with --run the dry run uses a copy of that cluster.")
@click.option("--gres-conf", "gres_conf", metavar="FILE", default=None,
              help="With --like: the gres.conf to read (default: the one beside the slurm.conf).")
@click.option("--config", "-c", "config_path", metavar="FILE", default=None,
              help="Judge the header against the cluster of this spec YAML instead (as --like does).")
@click.pass_context
def command(ctx, scripts, as_json, run, real, no_shellcheck, nodes, strict, timeout, like, gres_conf, config_path):
    """Find the bugs of batch scripts that only show on several nodes.

    \b
    Examples:
      simcluster check job.sbatch                # FILE:LINE: error|warning|note: ... then the fix
      simcluster check --json examples/*.sh
      simcluster check --run job.sbatch          # + a dry run: duplicate ranks, GPUs shared ...
      simcluster check --nodes 4 train.slurm     # the script is submitted with sbatch -N 4
      simcluster check --like prod/slurm.conf job.sbatch   # would production take this header?

    Static rules read a real bash parse tree (tree-sitter-bash): which shell expands each
    variable (`srun torchrun --node_rank=$SLURM_NODEID` is expanded once, by the batch shell),
    RANK exported before srun, --signal without B: while the script traps it, CUDA_VISIBLE_DEVICES
    overrides, MASTER_ADDR=localhost, fixed ports, tasks vs nproc_per_node vs GPUs, double
    launches, torchrun on several nodes told of one (no --nnodes, --standalone), missing
    --kill-on-bad-exit. Launcher options held in variables and bash arrays
    (`srun torchrun "${ARGS[@]}"`) are followed. Helper scripts it runs (bash/sh/source/. FILE) are
    followed, and a Python entry point beside the script is read (frameworks that map Slurm's
    variables themselves). ShellCheck's findings are shown with them where it is installed.
    With --like (or --config) the header is judged against that cluster as slurmctld would:
    partition, MaxTime, node counts, GPU types and counts, features, CPUs and memory per node,
    accounts and QoS, each with Slurm's answer and what the cluster offers.
    Where the outcome depends on a program check cannot read (an entry point not beside the
    script, an installed module), it says so in a note, not a warning.
    Exit 1 when a multi-node error is found (with --strict: any finding, ShellCheck's
    included), 0 when clean, warnings only or ShellCheck findings only, 2 when a script
    cannot be read.
    See docs/check.md.
    """
    # lazy: the checker (tree-sitter) loads only when the command runs, not for --help
    from provisioner.check.report import (check_text, exit_code, format_finding, read_scripts, summary,
                                          to_json)
    if real and not run:
        raise UsageError("--real only goes with --run", "simcluster check --run --real SCRIPT")
    if run and len(scripts) != 1:
        raise UsageError("--run takes one script", "simcluster check --run job.sbatch")
    texts = read_scripts(scripts)
    target = None
    if like or config_path or gres_conf:
        from provisioner.check.mirror import load_target  # lazy: the spec loads only when a cluster is named
        target = load_target(like, gres_conf, config_path)
    progress = (lambda m: None) if as_json else (lambda m: click.echo(m, err=True))
    extra = {}
    if target is not None:
        from provisioner.check.fit import describe
        progress(f" - judged against {target.label}: {describe(target.spec)}"
                 + (f" ({target.report})" if target.report else ""))
        extra["cluster"] = {"source": target.label, "partitions": [p.name for p in target.spec.partitions],
                            "nodes": len(target.spec.nodes), "report": target.report}
    findings = []
    for path, text in texts:
        findings += check_text(path, text, use_shellcheck=not no_shellcheck, nodes=nodes,
                               cluster=target.spec if target is not None else None)
    if run:
        from provisioner.check.dryrun import dry_run  # lazy: the cluster model loads only for --run
        result = dry_run(texts[0][0], texts[0][1], real=real, timeout=timeout, progress=progress, nodes=nodes,
                         target=target)
        findings += result.findings
        extra["run"] = result.to_dict()
    if as_json:
        echo_json(to_json(findings, [p for p, _ in texts], extra or None, strict=strict))
    else:
        for f in findings:
            click.echo(format_finding(f))
        if run:
            click.echo(result.table())
        click.echo(summary(findings, len(texts), target.label if target is not None else None))
    ctx.exit(exit_code(findings, strict))
