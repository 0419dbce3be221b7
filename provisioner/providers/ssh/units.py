"""The systemd units the Ansible roles run on a deployed cluster's hosts, by what a host is:
what `status --ssh` asks systemd about (provider.py) and what `fault heal --ssh` starts
(faults.py)."""

from __future__ import annotations

from typing import Tuple

# The roles' units, in the order they start (each after what it needs): what `status --ssh`
# asks systemd about and what `fault heal --ssh` starts. A host runs only its own
# (host_units); the deploy turns off Debian's units of the others.
UNITS = ("munge", "simcluster-mariadb", "slurmdbd", "slurmctld", "slurmd", "simcluster-slurmrestd")


def host_units(controller: bool, compute: bool, accounting: bool, rest: bool) -> Tuple[str, ...]:
    """The units the roles run on a host: the controller's (slurmctld; slurmdbd and its
    MariaDB with accounting; slurmrestd with rest), a compute node's (slurmd), munge on all."""
    wanted = {"munge"}
    if controller:
        wanted |= {"slurmctld"} | ({"simcluster-mariadb", "slurmdbd"} if accounting else set()) | \
            ({"simcluster-slurmrestd"} if rest else set())
    if compute:
        wanted.add("slurmd")
    return tuple(u for u in UNITS if u in wanted)
