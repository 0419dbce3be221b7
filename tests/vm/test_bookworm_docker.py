"""Case d of the VM matrix: the docker backend on a stock Debian 12 host (systemd, cgroup v2),
as root, in the same booted guest as case a (one boot, one `make setup`).

The guest's engine is Debian's docker.io (in the bookworm image, off at boot: started here
as its systemd unit). The node image is not built in the guest (CPU work there is 20-30x
slower): it is built on this host as the docker tests build it (`simcluster image build`'s
code, the default tag, cached layers), loaded there into a throwaway engine's data root,
and that data root is plugged into the guest as a disk (tests/vm/docker_disk.py: a
`docker load` in the guest alone took 4-5 minutes). Then, in the guest, the way a user runs it:

- `up --backend docker --privileged --nodes 2 --fake-gpus 2`: `status` says the limits are
  enforced through cgroup v2, and `verify --suite basic` passes with basic.limits PASS
  (a job over its --mem ends OUT_OF_MEMORY) and basic.isolation PASS (another node's GPU
  refused with EPERM): Slurm's cgroup/v2 plugin in each node container's own cgroup
  namespace, with no systemd there (docker/entrypoint.sh prepares the tree);
- `up --backend docker` (unprivileged): the nodes come up and run jobs, and `status` and
  `up` say that nothing is enforced and why.

`down` leaves no container or network of either.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from tests.vm import docker_disk
from tests.vm.conftest import (CHECK_TIMEOUT_S, CHECKOUT, assert_report_passed, guest_platform, verify_report,
                               vm_make_setup)

pytestmark = [pytest.mark.vm]

SIMCLUSTER = f"{CHECKOUT}/.venv/bin/simcluster"
PRIVILEGED, PLAIN = "vmd", "vmdu"


def _host_engine() -> None:
    from tests.docker.conftest import engine_available
    if not engine_available():
        if os.environ.get("CI"):
            pytest.fail("CI=true but no docker engine answers on this host: the node image is built here")
        pytest.skip("no docker engine on this host to build the node image (start dockerd, or "
                    "'make setup-docker')")


@pytest.fixture(scope="module")
def docker_guest(bookworm_vm, vm_timings):
    """The bookworm guest with `make setup` done and its docker engine started on a data root
    that holds this checkout's node image (tests/vm/docker_disk.py: loaded on this host,
    plugged in as a disk); every cluster of this module is down, the engine stopped and its
    disk unmounted afterwards (the other cases in the same guest never see it)."""
    from provisioner.providers.docker import image
    _host_engine()
    vm, timings = bookworm_vm, vm_timings.setdefault("bookworm", {})
    vm_make_setup(vm)
    started = time.monotonic()
    tag = image.image_tag()
    if not image.image_is_current(tag):  # as `up` would: built once, its layers cached
        image.build_image(lambda line: None)
    disk = docker_disk.build(tag)
    timings["docker_image_and_disk_on_host"] = round(time.monotonic() - started, 1)
    try:
        started = time.monotonic()
        device = vm.attach_disk(disk, "simdocker")
        vm.run(f"mkdir -p /var/lib/docker && mount {device} /var/lib/docker && systemctl start docker.service "
               f"&& docker image inspect -f '{{{{.Id}}}}' {tag}", timeout=300, check=True)
        timings["docker_engine_start"] = round(time.monotonic() - started, 1)
        yield vm
    finally:
        vm.run(f"for c in {PRIVILEGED} {PLAIN}; do {SIMCLUSTER} down --name $c >/dev/null 2>&1; done; "
               "systemctl stop docker.socket docker.service containerd.service; umount /var/lib/docker",
               timeout=300)


def test_docker_host_is_what_case_d_needs(docker_guest):
    """Debian 12, systemd, cgroup v2 only, and Debian's docker engine reporting cgroup v2."""
    version, init, cgroupfs, _ = platform = guest_platform(docker_guest)
    assert version.startswith("12") and init == "systemd" and cgroupfs == "cgroup2fs", platform
    info = docker_guest.run("docker info --format '{{.CgroupVersion}} {{.CgroupDriver}}'", check=True).stdout.split()
    assert info == ["2", "systemd"], info


def test_docker_privileged_enforces_limits_through_cgroup_v2(docker_guest, vm_timings):
    """`up --privileged`: status says enforced (cgroup v2); verify --suite basic passes, no
    check FAIL, none SKIP for a reason of the host, basic.limits and basic.isolation PASS.
    The job cgroups are below each node container's own scope (its cgroup namespace)."""
    vm, timings = docker_guest, vm_timings.setdefault("bookworm", {})
    started = time.monotonic()
    up = vm.run(f"cd /tmp && {SIMCLUSTER} up --backend docker --privileged --name {PRIVILEGED} --nodes 2 "
                f"--fake-gpus 2", timeout=900)
    timings["docker_up_privileged"] = round(time.monotonic() - started, 1)
    assert up.returncode == 0, f"exit {up.returncode}\n{up.stdout}\n{up.stderr[-4000:]}"
    assert "unlike a production host here: limits" not in up.stdout + up.stderr, up.stdout + up.stderr
    status = json.loads(vm.run(f"{SIMCLUSTER} status --name {PRIVILEGED} --json", check=True).stdout)
    assert status["node_cgroups"].startswith("enforced") and "cgroup v2" in status["node_cgroups"], status
    started = time.monotonic()
    res = vm.run(f"cd /tmp && {SIMCLUSTER} verify --name {PRIVILEGED} --suite basic --json "
                 f"--timeout {CHECK_TIMEOUT_S}", timeout=1800)
    timings["docker_verify_basic"] = round(time.monotonic() - started, 1)
    report, checks, lines = verify_report(res.stdout, res.returncode, res.stderr)
    print(f"verify --suite basic, docker --privileged on cgroup v2:\n{lines}")
    assert_report_passed(report, res.returncode, res.stderr, "the host")
    assert checks["basic.limits"]["status"] == "PASS" and "OUT_OF_MEMORY" in checks["basic.limits"]["message"], lines
    assert checks["basic.isolation"]["status"] == "PASS" and "EPERM" in checks["basic.isolation"]["message"], lines
    # Slurm's tree in node1's container: its scope, below the container's own cgroup.
    tree = vm.run(f"docker exec simcluster-{PRIVILEGED}-node1 sh -c 'cat /proc/self/cgroup; "
                  "ls -d /sys/fs/cgroup/system.slice/*_slurmstepd.scope; grep ^IgnoreSystemd /etc/slurm/cgroup.conf'",
                  check=True).stdout.split()
    assert tree == ["0::/init", "/sys/fs/cgroup/system.slice/node1_slurmstepd.scope", "IgnoreSystemd=yes"], tree
    down = vm.run(f"{SIMCLUSTER} down --name {PRIVILEGED}", timeout=300)
    assert down.returncode == 0, down.stderr
    left = vm.run(f"docker ps -aq --filter label=io.simcluster.cluster={PRIVILEGED}; "
                  f"docker network ls -q --filter label=io.simcluster.cluster={PRIVILEGED}", check=True)
    assert left.stdout.strip() == "", left.stdout


def test_docker_unprivileged_runs_jobs_and_says_limits_are_not_enforced(docker_guest, vm_timings):
    """Unprivileged on cgroup v2: slurmd starts (a cgroup plugin that asks nothing of the
    read-only tree), jobs run on both nodes, and `up` and `status` say nothing is enforced
    and how to get it."""
    vm, timings = docker_guest, vm_timings.setdefault("bookworm", {})
    started = time.monotonic()
    up = vm.run(f"cd /tmp && {SIMCLUSTER} up --backend docker --name {PLAIN} --nodes 2", timeout=900)
    timings["docker_up_unprivileged"] = round(time.monotonic() - started, 1)
    assert up.returncode == 0, f"exit {up.returncode}\n{up.stdout}\n{up.stderr[-4000:]}"
    assert "unlike a production host here: limits: not enforced: unprivileged containers" in up.stdout + up.stderr, \
        up.stdout + up.stderr
    jobs = vm.run(f"{SIMCLUSTER} exec --name {PLAIN} -- srun -N2 -n2 hostname", timeout=300)
    assert jobs.returncode == 0 and sorted(jobs.stdout.split()) == ["node1", "node2"], jobs.stdout + jobs.stderr
    status = json.loads(vm.run(f"{SIMCLUSTER} status --name {PLAIN} --json", check=True).stdout)
    assert re.match(r"not enforced: unprivileged containers .*'up --privileged'", status["node_cgroups"]), status
    conf = vm.run(f"docker exec simcluster-{PLAIN}-node1 grep ^CgroupPlugin /etc/slurm/cgroup.conf", check=True)
    assert conf.stdout.strip() == "CgroupPlugin=cgroup/v1", conf.stdout
    down = vm.run(f"{SIMCLUSTER} down --name {PLAIN}", timeout=300)
    assert down.returncode == 0, down.stderr
    left = vm.run(f"docker ps -aq --filter label=io.simcluster.cluster={PLAIN}", check=True)
    assert left.stdout.strip() == "", left.stdout
