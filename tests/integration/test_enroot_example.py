"""examples/enroot/: an Enroot/pyxis training workflow, as written, on a 2-node cluster.

Runs the example's run.sh as a user would: the image the sbatch line names made by
`simcluster image import` from the training image (torch inside), a cluster made with
`up --like` from the production slurm.conf (partition admin, account itscspod, 8 H800 per
node) scaled to 2 nodes, the workflow's sbatch line with its pyxis options. The batch
script runs in the container and starts the job's step with srun from inside it; each of
the 16 tasks computes its ranks from its own SLURM_* variables, runs nvidia-smi (fake
H800s) on local rank 0, and the DDP stand-in trains to the same weights on every rank.
The job then ends FAILED, as on production, through the launcher's own last line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid

import pytest

from tests.conftest import REPO, run_cli
from tests.integration.test_containers import CONTAINER_MARKS

pytestmark = CONTAINER_MARKS + [
    pytest.mark.skipif(shutil.which("docker") is None, reason="the training image is a docker image: make setup-docker")]


def test_enroot_workflow_runs_as_written(sim_home, tmp_path):
    from provisioner.providers.docker.image import image_tag
    tag = image_tag(True)
    run_cli(["image", "build", "--train"], sim_home, check=True, timeout=1800)  # cached: seconds
    scratch = tmp_path / "scratch"
    env = dict(os.environ, SIMCLUSTER_HOME=str(sim_home), SCRATCH=str(scratch), NAME=f"enr{uuid.uuid4().hex[:5]}",
               SIMCLUSTER=str(REPO / ".venv" / "bin" / "simcluster"), IMAGE=f"dockerd://{tag}")
    env.pop("SLURM_CONF", None)
    proc = subprocess.run(["bash", str(REPO / "examples" / "enroot" / "run.sh")], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-5000:]
    job = re.search(r"submitted job (\d+)", proc.stdout).group(1)
    # As on production: the launcher's last line (`[ ... ] && [ $SLURM_LOCALID -eq 0 ] && kill`)
    # is false on every task but local rank 0, which then exit 1, and the job ends FAILED 1:0.
    assert f"job {job}: FAILED|1:0" in proc.stdout, proc.stdout[-3000:]
    failed = set()
    for tasks in re.findall(r"srun: error: \S+: tasks? ([\d,\-]+): Exited with exit code 1", proc.stdout):
        for part in tasks.split(","):
            lo, _, hi = part.partition("-")
            failed.update(range(int(lo), int(hi or lo) + 1))
    assert failed == set(range(16)) - {0, 8}, proc.stdout[-3000:]

    summary = json.loads((scratch / "out" / f"redpajama-{job}.json").read_text())
    assert summary["ok"] and summary["world_size"] == 16 and summary["num_nodes"] == 2, summary
    assert len(summary["hosts"]) == 2, summary["hosts"]
    ranks = summary["ranks"]
    assert sorted(r["global_rank"] for r in ranks) == list(range(16))
    for r in ranks:
        # GPT_GLOBAL_RANK = SLURM_NODEID * SLURM_NTASKS_PER_NODE + SLURM_LOCALID, per task.
        assert r["global_rank"] == r["node_rank"] * 8 + r["local_rank"], r
        # The trainer ran on the image's python (the container), not this machine's.
        assert r["python"].startswith("/opt/simcluster/venv/"), r
    by_host = {h: sorted(r["node_rank"] for r in ranks if r["host"] == h) for h in summary["hosts"]}
    assert sorted(set(v[0] for v in by_host.values())) == [0, 1] and all(len(v) == 8 for v in by_host.values())

    out = (scratch / "out" / "slurm" / f"slurm-{job}.out").read_text()
    # The launcher's `nvidia-smi | grep "NVIDIA H800"` on local rank 0 of each node: 8 GPUs each.
    assert out.count("NVIDIA H800") == 16, out[-3000:]
    assert "redpajama: 16 ranks on 2 nodes, weights equal: True" in out, out[-3000:]
    # `nvidia-smi dmon --filename` of each node's local rank 0 wrote its file (into the out mount).
    assert len(list((scratch / "out" / "slurm").glob(f"slurm-{job}.*.gutil"))) == 2
    # run.sh took the cluster down; the user's image stays.
    assert (scratch / "home" / "containers" / "pytorch-23.10.sqsh").is_file()
    assert env["NAME"] not in run_cli(["list"], sim_home).stdout
