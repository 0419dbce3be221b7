"""Case b of the VM matrix: a Debian 13 (trixie) host with its own Slurm 24.11, systemd and
cgroup v2, as root. From a copy of the checkout, the way the README has a user do it:
`make setup`, then `simcluster test --nodes 2 --fake-gpus 2 --suite basic`; every check of
the report passes and none is SKIP for a reason of the host.
"""

from __future__ import annotations

import re

import pytest

from tests.vm.conftest import guest_platform, vm_test_basic

pytestmark = [pytest.mark.vm]


def test_trixie_host_is_what_case_b_needs(trixie_vm):
    """The guest is the platform case b claims: trixie, systemd as PID 1, cgroup v2, Slurm 24.11."""
    version, init, cgroupfs, slurm = platform = guest_platform(trixie_vm)
    assert version.startswith("13"), platform
    assert init == "systemd", platform
    assert cgroupfs == "cgroup2fs", platform
    assert re.fullmatch(r"slurm(-wlm)? 24\.11\.\d+", slurm), platform  # Debian's says "slurm-wlm 24.11.5"


def test_trixie_make_setup_then_test_basic(trixie_vm, vm_timings):
    """`make setup`, then the README's CI command; the verify report passes, with no SKIP
    caused by the host."""
    timings = vm_timings.setdefault("trixie", {})
    res, _, _ = vm_test_basic(trixie_vm, "vmb", timings)
    # `up`'s steps print their seconds ("... done (0.50s)"): their sum is up's own time
    steps = [float(m) for m in re.findall(r"\.\.\. done \((\d+\.\d+)s\)", res.stderr)]
    timings["up_steps_sum"] = round(sum(steps), 1)
    assert trixie_vm.run("pgrep -a slurmd; pgrep -a slurmctld").stdout.strip() == "", \
        "simcluster test left Slurm daemons running in the guest"
