"""Case b of the VM matrix: a Debian 13 (trixie) host with its own Slurm 24.11, systemd and
cgroup v2, as root. From a copy of the checkout, the way the README has a user do it:
`make setup`, then `simcluster test --nodes 2 --fake-gpus 2 --suite basic`; every check of
the report passes and none is SKIP for a reason of the host.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.vm.conftest import CHECKOUT, GUEST_LOG_ROOT, vm_make_setup

pytestmark = [pytest.mark.vm]

# Per-check time limit: the guest runs under qemu's TCG, 20-30x slower than a host for CPU
# work, and several checks (mpi, cpus-per-task, dependency, requeue) take 2-3 minutes there
# against verify's 60 s default for basic.
CHECK_TIMEOUT_S = 300
# SKIPs that come from what the cluster was asked for, not from the host: basic.container
# needs `make setup-containers` (the SPANK plugin), which the README's first command leaves out.
SKIPS_NOT_FROM_THE_HOST = {"basic.container"}


def test_trixie_host_is_what_case_b_needs(trixie_vm):
    """The guest is the platform case b claims: trixie, systemd as PID 1, cgroup v2, Slurm 24.11."""
    res = trixie_vm.run("cat /etc/debian_version; ps -p 1 -o comm=; stat -fc %T /sys/fs/cgroup; "
                        "/usr/sbin/slurmctld -V", check=True)
    version, init, cgroupfs, slurm = res.stdout.split("\n")[:4]
    assert version.startswith("13"), res.stdout
    assert init == "systemd", res.stdout
    assert cgroupfs == "cgroup2fs", res.stdout
    assert re.fullmatch(r"slurm(-wlm)? 24\.11\.\d+", slurm), res.stdout  # Debian's says "slurm-wlm 24.11.5"


def test_trixie_make_setup_then_test_basic(trixie_vm, vm_timings):
    """`make setup`, then the README's CI command; the verify report passes, with no SKIP
    caused by the host."""
    timings = vm_timings.setdefault("trixie", {})
    vm_make_setup(trixie_vm)
    started = time.monotonic()
    res = trixie_vm.run(f"cd {CHECKOUT} && .venv/bin/simcluster test --name vmb --nodes 2 "
                        f"--fake-gpus 2 --suite basic --timeout {CHECK_TIMEOUT_S} --json "
                        f"--logs-dir {GUEST_LOG_ROOT}/vmb", timeout=1800)
    timings["simcluster_test_basic"] = round(time.monotonic() - started, 1)
    assert res.stdout.strip(), f"no JSON report (exit {res.returncode}):\n{res.stderr[-6000:]}"
    report = json.loads(res.stdout)
    timings["verify_basic"] = report["seconds"]
    lines = "\n".join(f"{c['name']}: {c['status']} {c['message']}" for c in report["checks"])
    failed = [c["name"] for c in report["checks"] if c["status"] == "FAIL"]
    host_skips = [c["name"] for c in report["checks"]
                  if c["status"] == "SKIP" and c["name"] not in SKIPS_NOT_FROM_THE_HOST]
    assert res.returncode == 0 and report["passed"] and not failed, \
        f"failed: {failed}\n{lines}\nstderr:\n{res.stderr[-4000:]}"
    assert not host_skips, f"SKIP caused by the trixie host: {host_skips}\n{lines}"
    # `up`'s steps print their seconds ("... done (0.50s)"): their sum is up's own time
    steps = [float(m) for m in re.findall(r"\.\.\. done \((\d+\.\d+)s\)", res.stderr)]
    timings["up_steps_sum"] = round(sum(steps), 1)
    assert trixie_vm.run("pgrep -a slurmd; pgrep -a slurmctld").stdout.strip() == "", \
        "simcluster test left Slurm daemons running in the guest"
