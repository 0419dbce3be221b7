"""Options and helpers shared by several commands."""

from __future__ import annotations

import click

from provisioner.errors import UsageError

name_option = click.option("--name", "-n", default="default", show_default=True, metavar="NAME",
                           help="Cluster name (state in $SIMCLUSTER_HOME/NAME).")


def echo_json(data) -> None:
    import json
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def fake_gpus_value(text):
    """--fake-gpus alone fakes the --gpus list; --fake-gpus K fakes K GPUs (ids 0..K-1)."""
    if text is None:
        return None
    if text == "all":
        return True
    if str(text).isdigit() and int(text) > 0:
        return int(text)
    raise UsageError(f"--fake-gpus expects a positive GPU count, got {text!r}",
                     "use --fake-gpus alone to simulate the --gpus list, or --fake-gpus 2")
