"""Docker nodes are hosts of their own: the lookups the local backend is held to (one
address per name and per numeric address, IPv6-mapped answers, binding every result)
hold in containers too, and examples/mpi/run.slurm runs across them with srun --mpi=pmix."""

from __future__ import annotations

import json
import re
import shutil

from tests.conftest import REPO, run_cli
from tests.integration.test_names import LOOKUPS


def test_docker_nodes_resolve_like_hosts_and_run_mpi(docker_cluster, sim_home):
    name = docker_cluster("--nodes", "2")
    shared = sim_home / name / "shared"
    (shared / "lookups.py").write_text(LOOKUPS)
    out = run_cli(["exec", "--name", name, "--", "srun", "-N2", "--ntasks-per-node=1", "python3",
                   "/shared/lookups.py", "24001", "localhost"], sim_home, check=True).stdout
    results = {r["node"]: r for r in map(json.loads, out.splitlines())}
    addr1, addr2 = results["node1"]["own"], results["node2"]["own"]
    assert addr1 != addr2
    for r in results.values():
        assert r["node1"]["any"] == [addr1] and r["node2"]["any"] == [addr2], r
        assert r[r["own"]]["any"] == [r["own"]] and r["127.0.0.1"]["any"] == ["127.0.0.1"], r
        assert r["node2"]["v6mapped"] == [f"::ffff:{addr2}"], r
        assert r["bound"] == [r["own"]], r
        assert r["hostname"] == r["node"], r  # a container is a host of its own

    shutil.copytree(REPO / "examples" / "mpi", shared / "mpi")
    sub = run_cli(["exec", "--name", name, "--", "bash", "-c", "cd /shared/mpi && sbatch --wait --parsable run.slurm"],
                  sim_home, check=True, timeout=300)
    job_id = sub.stdout.strip().split(";")[0]
    text = (shared / "mpi" / f"mpi_{job_id}.out").read_text()
    ranks = re.findall(r"rank (\d)/4 on (node\d): allreduce sum=10 over node1,node2", text)
    assert sorted(ranks) == [("0", "node1"), ("1", "node1"), ("2", "node2"), ("3", "node2")], text
