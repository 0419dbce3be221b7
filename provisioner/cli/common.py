"""Options and helpers shared by several commands."""

from __future__ import annotations

import json

import click

from provisioner.config.validate import NAME_RE


def check_name(ctx, param, value):
    """--name of an existing cluster: a plain name, never a path ('../x' or '/tmp' would
    point status/down outside $SIMCLUSTER_HOME)."""
    if value is not None and not NAME_RE.match(value):
        raise click.BadParameter(f"{value!r} is not a valid cluster name "
                                 "(lowercase letters, digits and '-', starting with a letter, at most 31)")
    return value


name_option = click.option("--name", "-n", default="default", show_default=True, metavar="NAME",
                           callback=check_name, help="Cluster name (state in $SIMCLUSTER_HOME/NAME).")


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))
