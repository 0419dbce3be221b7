"""`fault kill-controller` and `fault stop-accounting`: one of the cluster's daemons dies
(SIGKILL); the repair (`fault heal`, `up`, `start`) starts it again from its saved state."""

from __future__ import annotations

import signal

from provisioner.cluster.faults.record import check_can_inject, record
from provisioner.cluster.model.handle import Cluster
from provisioner.errors import UsageError


def kill_controller(c: Cluster) -> str:
    check_can_inject(c)
    if not c.signal_daemons(["slurmctld"], signal.SIGKILL):
        raise UsageError("slurmctld is not running", f"simcluster fault heal --name {c.name}")
    record(c, "kill-controller")
    return "killed slurmctld (SIGKILL); running jobs go on, its saved state is kept for the restart"


def stop_accounting(c: Cluster) -> str:
    if not c.spec.accounting:
        raise UsageError(f"cluster '{c.name}' has no accounting", "create it with --accounting")
    check_can_inject(c)
    if not c.signal_daemons(["slurmdbd"], signal.SIGKILL):
        raise UsageError("slurmdbd is not running", f"simcluster fault heal --name {c.name}")
    record(c, "stop-accounting")
    return "stopped slurmdbd (SIGKILL); jobs keep running, slurmctld keeps their records until it is back"
