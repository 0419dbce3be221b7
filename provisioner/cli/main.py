"""Entry point: the `simcluster` group, and the one place errors become exit codes."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback

import click

from provisioner import __version__
from provisioner.config.versions import SLURM_SUITES, host_slurm_version
from provisioner.errors import SimclusterError

COMMANDS = ["up", "down", "stop", "start", "fault", "status", "list", "env", "exec", "render", "export_logs", "image", "deploy", "verify", "test_cmd", "check", "scale", "token"]


class _Group(click.Group):
    """Turns SimclusterError into one line + exit code; a traceback only with -v."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SimclusterError as exc:
            verbose = bool(ctx.obj and ctx.obj.get("verbose"))
            if verbose:
                traceback.print_exc()
            click.echo(f"error: {exc.one_line()}", err=True)
            if exc.details:
                click.echo(exc.details, err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # `simcluster status | head`: the reader left; end as a Unix tool killed by SIGPIPE
            # would (status 141), without an error line. stdout goes to /dev/null so that
            # the interpreter's last flush does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(128 + signal.SIGPIPE)
        except OSError as exc:
            # A path we cannot use (SIMCLUSTER_HOME under /proc, DIR not writable): one line too.
            if ctx.obj and ctx.obj.get("verbose"):
                traceback.print_exc()
            where = f": {exc.filename}" if exc.filename else ""
            click.echo(f"error: {exc.strerror or exc}{where}", err=True)
            ctx.exit(1)


def version_text() -> str:
    """`simcluster --version`: ours, the host's Slurm (local backend) and the Slurm releases
    docker clusters can run, with the node images already built."""
    lines = [f"simcluster {__version__}",
             f"Slurm on this host (local backend): {host_slurm_version() or 'none (apt-get install slurmctld slurmd)'}",
             "Slurm for docker clusters (simcluster image build --slurm R; up --backend docker --slurm R): "
             + ", ".join(f"{rel} (Debian {suite})" for rel, suite in SLURM_SUITES.items())]
    try:  # images already built; no engine or no SDK: say nothing about images
        # lazy: the docker SDK loads only for --version, not at every start
        from provisioner.providers.docker import engine, image
        if engine.engine_version():
            built = [tag for rel in SLURM_SUITES for tag in (image.image_tag(False, rel), image.image_tag(True, rel))
                     if image.image_exists(tag)]
            lines.append("node images built: " + (", ".join(built) if built else "none yet"))
    except Exception:
        pass
    return "\n".join(lines)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit(0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and more detail on errors.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show simcluster's version and the Slurm versions it can run.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """simcluster: a real multi-node Slurm cluster on this machine.

    \b
    Quick start:
      simcluster up --nodes 2 --fake-gpus 2     # 2 virtual nodes, one (fake) GPU each
      eval "$(simcluster env)"; sinfo; srun -N2 hostname
      simcluster status
      simcluster down

    State lives in $SIMCLUSTER_HOME (default ~/.local/state/simcluster/<name>; root's
    clusters, which every local user may use: /var/lib/simcluster/<name>).
    """
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


def _register() -> None:
    for name in COMMANDS:
        module = importlib.import_module(f"provisioner.cli.{name}")
        cli.add_command(module.command)


_register()


def main() -> None:
    """Run the CLI; bad flags also end in one line (click would print three)."""
    try:
        rv = cli.main(prog_name="simcluster", standalone_mode=False)
    except click.UsageError as exc:
        cmd = exc.ctx.command_path if exc.ctx else "simcluster"
        click.echo(f"error: {exc.format_message()} (see '{cmd} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
