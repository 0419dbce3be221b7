"""Slurm's cgroup limits on the docker backend: a --privileged cluster on a cgroup v1 host
runs proctrack/cgroup and task/cgroup in each node container's own cgroup namespace, so
--mem ends a job OUT_OF_MEMORY, a step whose task exits early is killed as a whole, and a
job cannot open the GPU devices it was not given. One cluster: 2 nodes, 2 fake GPUs each.

Unprivileged clusters enforce nothing (their status says why): tests/unit/providers/docker.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.conftest import run_cli
from tests.docker.conftest import LABEL, docker_ids, networks

pytestmark = pytest.mark.integration

# Opens every /dev/nvidiaN of the node: fake devices have no driver (ENXIO) unless the
# job's devices cgroup denies them (EPERM).
OPEN_GPUS = """import errno, os
for d in sorted(x for x in os.listdir("/dev") if x.startswith("nvidia")):
    try:
        os.close(os.open("/dev/" + d, os.O_RDWR)); print(d, "opened")
    except OSError as e:
        print(d, errno.errorcode[e.errno])
"""
MEM_JOB = """#!/bin/bash
#SBATCH -N1 --mem=200M --output=/shared/mem-%j.out
python3 -c "b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated 600 MB')"
"""
EARLY_EXIT = """#!/bin/bash
[ "$SLURM_PROCID" = 1 ] && exit 0
sleep 60
"""


def test_privileged_docker_cluster_enforces_memory_steps_and_gpu_devices(sim_home):
    name = f"d{uuid.uuid4().hex[:6]}"
    try:
        up = run_cli(["up", "--backend", "docker", "--privileged", "--name", name, "--nodes", "2",
                      "--gpus", "0-3", "--fake-gpus"], sim_home, timeout=900)
        if up.returncode != 0 and "operation not permitted" in up.stderr:
            # A sandboxed engine (its own capability bounding set lacks some) cannot start
            # --privileged containers at all.
            pytest.skip(f"this docker engine cannot run --privileged containers: {up.stderr.strip().splitlines()[-1]}")
        assert up.returncode == 0, up.stderr

        def slurm(*argv, check=True):
            return run_cli(["exec", "--name", name, "--", *argv], sim_home, check=check, timeout=300)

        status = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
        assert status["node_network"] == f"a container each on docker network simcluster-{name} (own address and ports)"
        if "cgroup v2" in status["node_cgroups"]:
            pytest.skip(f"cgroup v2 host: {status['node_cgroups']}")
        assert status["node_cgroups"].startswith("enforced: proctrack/cgroup and task/cgroup"), status
        modes = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.CgroupnsMode}}",
                                f"simcluster-{name}-node1", f"simcluster-{name}-node2"],
                               stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        assert modes == ["private", "private"]
        conf = (sim_home / name / "etc" / "slurm.conf").read_text()
        assert "ProctrackType=proctrack/cgroup" in conf and "task/cgroup" in conf

        shared = sim_home / name / "shared"
        (shared / "mem.sh").write_text(MEM_JOB)
        job = slurm("sbatch", "--wait", "--parsable", "mem.sh", check=False).stdout.strip().split(";")[0]
        shown = slurm("scontrol", "show", "job", job).stdout
        assert "JobState=OUT_OF_MEMORY" in shown, shown + (shared / f"mem-{job}.out").read_text()

        # One task exits early: -W2 ends the step, and every other task is killed with it.
        (shared / "early.sh").write_text(EARLY_EXIT)
        (shared / "early.sh").chmod(0o755)
        step = slurm("srun", "-n10", "-N1", "-O", "-W2", "/shared/early.sh", check=False)
        assert "tasks 0,2-9: Killed" in step.stderr, step.stderr

        # node2 holds GPUs 2 and 3: a job given one of them cannot open the other.
        (shared / "gpus.py").write_text(OPEN_GPUS)
        seen = dict(ln.split() for ln in slurm("srun", "-w", "node2", "--gres=gpu:1", "python3",
                                               "/shared/gpus.py").stdout.splitlines())
        assert sorted(seen) == ["nvidia2", "nvidia3"], seen  # only the node's own GPUs exist there
        assert sorted(seen.values()) == ["ENXIO", "EPERM"], seen
    finally:
        run_cli(["down", "--name", name], sim_home)
    assert docker_ids(f"label={LABEL}={name}") == [], f"containers of {name} left behind"
    assert networks(name) == [], f"network of {name} left behind"
