"""Accounting with a real database: `up --accounting` runs slurmdbd on a private MariaDB.

sacct, sacctmgr and sshare must work the way client libraries (submitit, snakemake's
Slurm executor) use them: a finished job is in sacct with its final state and nodes.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from provisioner.cluster.model.state import ClusterState
from provisioner.named_clusters import load
from provisioner.paths import ClusterLayout
from provisioner.providers.local.processes import cluster_pids
from provisioner.verify.accounting import check_accounting
from tests.conftest import REPO, TEST_HOME_ROOT, Cluster, daemons_under, run_cli
from tests.integration.test_rootless import _as_user, unprivileged_user  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def sacct(cluster, job_id: str, allocations_only: bool = True) -> List[Dict[str, str]]:
    fields = ["JobID", "JobName", "State", "ExitCode", "NodeList", "Account", "User"]
    argv = ["sacct", "-n", "-P", "-j", job_id, f"--format={','.join(fields)}"] + (["-X"] if allocations_only else [])
    out = cluster.run(argv).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]


def wait_sacct(cluster, job_id: str, name: str, count: int = 1, timeout: float = 60) -> List[Dict[str, str]]:
    """Poll sacct until ``count`` allocations of job ``name`` are recorded in a final state.

    A job that ends within a second can reach the database before its start record:
    until that arrives sacct shows a placeholder (JobName 'allocation', the batch host
    only), so wait for the job's own name too.
    """
    deadline = time.monotonic() + timeout
    rows: List[Dict[str, str]] = []
    while time.monotonic() < deadline:
        rows = sacct(cluster, job_id)
        if len(rows) >= count and all(r["State"].split()[0] in FINAL and r["JobName"] == name for r in rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"sacct never recorded job {job_id} as finished ({count} rows); last seen: {rows}")


def sbatch(cluster, *args: str) -> str:
    return cluster.run(["sbatch", "--parsable", "-o", "/dev/null", *args], cwd="/tmp").stdout.strip()


def state_of(cluster) -> ClusterState:
    return ClusterState.load(ClusterLayout(cluster.root))


def client_of(cluster):
    """The Slurm client simcluster itself uses for the cluster (SIMCLUSTER_HOME of the test)."""
    os.environ["SIMCLUSTER_HOME"] = str(cluster.home)
    try:
        return load(cluster.name).client
    finally:
        del os.environ["SIMCLUSTER_HOME"]


def every_process(root: Path) -> List[int]:
    """Processes of the cluster by command line *or* environment (slurmdbd's argv is bare)."""
    return cluster_pids(root)


def test_sacct_sshare_status_and_verify_check(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2", "--accounting")
    assert "waiting for slurmctld to register with slurmdbd ... done" in c.up_output.stderr
    conf = c.slurm_conf.read_text()
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "JobAcctGatherType=jobacct_gather/linux" in conf and "PriorityType=priority/multifactor" in conf
    dbd_conf = c.root / "etc" / "slurmdbd.conf"
    assert stat.S_IMODE(dbd_conf.stat().st_mode) == 0o600
    st = state_of(c)
    # The database is private to the cluster: its own datadir, socket and port.
    assert (c.root / "mariadb" / "data" / "slurm_acct_db").is_dir()
    assert f"StoragePort={st.mariadb_port}" in dbd_conf.read_text()

    # The readiness gate saw the cluster registered: sacctmgr lists it with slurmctld's port.
    clusters = c.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster,ControlPort"]).stdout.split()
    assert f"{c.name}|{st.controller_port}" in clusters

    ok = sbatch(c, "-N2", "-J", "two-nodes", "--wrap", "srun hostname")
    bad = sbatch(c, "-J", "fails", "--wrap", "exit 3")
    arr = sbatch(c, "-J", "arr", "--array=1-3", "--wrap", "echo $SLURM_ARRAY_TASK_ID")

    [row] = wait_sacct(c, ok, "two-nodes")
    assert (row["State"], row["ExitCode"], row["NodeList"]) == ("COMPLETED", "0:0", "node[1-2]")
    assert row["Account"] == "simcluster" and row["User"] == st.user
    steps = {r["JobID"]: r for r in sacct(c, ok, allocations_only=False)}
    assert steps[f"{ok}.0"]["State"] == "COMPLETED" and steps[f"{ok}.0"]["NodeList"] == "node[1-2]"

    [row] = wait_sacct(c, bad, "fails")
    assert (row["State"], row["ExitCode"]) == ("FAILED", "3:0")

    rows = wait_sacct(c, arr, "arr", count=3)
    assert sorted(r["JobID"] for r in rows) == [f"{arr}_1", f"{arr}_2", f"{arr}_3"]
    assert all(r["State"] == "COMPLETED" and r["NodeList"].startswith("node") for r in rows)

    # Fair-share: the user's association under the cluster's account has values.
    share = c.run(["sshare", "-n", "-P", "-a", "--format=Account,User,RawShares,NormShares,FairShare"]).stdout
    rows = [[f.strip() for f in line.split("|")] for line in share.splitlines()]  # indented as a tree
    mine = [r for r in rows if r[:2] == ["simcluster", st.user]]
    assert mine, share
    assert float(mine[0][3]) > 0 and 0 <= float(mine[0][4]) <= 1

    status = json.loads(run_cli(["status", "--name", c.name, "--json"], c.home, check=True).stdout)
    acct = status["accounting"]
    assert status["healthy"] and acct["enabled"] and acct["healthy"] and acct["registered"]
    assert acct["slurmdbd"] == {"alive": True, "port": st.slurmdbd_port}
    assert acct["mariadb"]["alive"] and acct["mariadb"]["port"] == st.mariadb_port
    text = run_cli(["status", "--name", c.name], c.home, check=True).stdout
    assert "accounting healthy" in text and "cluster registered" in text

    # The check `verify` runs when accounting is on.
    passed, detail = check_accounting(client_of(c), st.cluster_spec)
    assert passed, detail
    assert "COMPLETED" in detail

    # A bug report carries the accounting logs, never the database password.
    bundle = tmp_path / "bundle"
    run_cli(["export-logs", str(bundle), "--name", c.name], c.home, check=True)
    for rel in ("logs/slurmdbd.log", "logs/mariadbd.log", "sacctmgr-show-cluster.txt", "sshare.txt"):
        assert (bundle / rel).is_file(), rel
    assert "StoragePass=<redacted>" in (bundle / "config" / "slurmdbd.conf").read_text()
    password = [l for l in dbd_conf.read_text().splitlines() if l.startswith("StoragePass=")][0].split("=", 1)[1]
    assert not any(password in p.read_text(errors="replace") for p in bundle.rglob("*") if p.is_file())

    root = c.root
    running = " ".join(daemons_under(root))
    assert "mariadbd" in running and "slurmdbd" in running
    run_cli(["down", "--name", c.name], c.home, check=True)
    assert not root.exists()
    assert daemons_under(root) == [] and every_process(root) == []


def test_two_accounting_clusters_side_by_side(make_cluster, sim_home, tmp_path):
    a = make_cluster("--nodes", "2", "--accounting")
    spec = tmp_path / "b.yaml"
    spec.write_text("apiVersion: simcluster/v1\nkind: Cluster\nname: acct-b\nnodes: 1\naccounting: true\n")
    up_b = run_cli(["up", "--config", str(spec)], sim_home, check=True)
    assert "1 nodes idle" in up_b.stdout
    b = Cluster(sim_home, "acct-b", up_b)

    sa, sb = state_of(a), state_of(b)
    ports_a = {sa.controller_port, sa.mariadb_port, sa.slurmdbd_port, *sa.node_ports.values()}
    ports_b = {sb.controller_port, sb.mariadb_port, sb.slurmdbd_port, *sb.node_ports.values()}
    assert len(ports_a) == 5 and len(ports_b) == 4 and not ports_a & ports_b

    # Both clusters number their first job 1: each database knows only its own.
    ja, jb = sbatch(a, "-J", "in-a", "--wrap", "true"), sbatch(b, "-J", "in-b", "--wrap", "true")
    assert wait_sacct(a, ja, "in-a")[0]["State"] == "COMPLETED"
    assert wait_sacct(b, jb, "in-b")[0]["State"] == "COMPLETED"
    assert a.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"]).stdout.split() == [a.name]

    # The same spec again is a no-op; without accounting it is a different cluster.
    again = run_cli(["up", "--config", str(spec)], sim_home)
    assert again.returncode == 0 and "already running" in again.stdout
    other = run_cli(["up", "--name", "acct-b", "--nodes", "1"], sim_home)
    assert other.returncode == 2 and "different spec" in other.stderr

    run_cli(["down", "--name", a.name], sim_home, check=True)
    assert every_process(a.root) == [] and not a.root.exists()
    jb2 = sbatch(b, "-J", "after", "--wrap", "true")
    assert wait_sacct(b, jb2, "after")[0]["State"] == "COMPLETED"
    assert run_cli(["status", "--name", "acct-b"], sim_home).returncode == 0


def test_without_accounting_nothing_changes(make_cluster):
    c = make_cluster("--nodes", "1")
    conf = c.slurm_conf.read_text()
    assert "AccountingStorageType=accounting_storage/none" in conf and "slurmdbd" not in conf
    assert not (c.root / "etc" / "slurmdbd.conf").exists() and not (c.root / "mariadb").exists()
    status = json.loads(run_cli(["status", "--name", c.name, "--json"], c.home, check=True).stdout)
    assert status["accounting"]["enabled"] is False and status["accounting"]["healthy"] is True
    passed, detail = check_accounting(client_of(c), state_of(c).cluster_spec)
    assert not passed and "not enabled" in detail


def test_a_database_that_fails_to_start_leaves_nothing_behind(sim_home, monkeypatch):
    from provisioner import named_clusters
    from provisioner.cluster.services import accounting
    from provisioner.config import load_spec
    from provisioner.errors import StartupError
    from provisioner.providers import provider_named

    monkeypatch.setenv("SIMCLUSTER_HOME", str(sim_home))
    monkeypatch.setattr(accounting, "SERVER_OPTIONS", accounting.SERVER_OPTIONS + ["--no-such-option=1"])
    spec = load_spec(None, {"name": "dbfail", "nodes": 1, "accounting": True})
    with pytest.raises(StartupError) as err:
        named_clusters.up(spec, provider_named("local"), progress=lambda msg: None)
    assert "creating the accounting database failed" in err.value.message
    assert "no-such-option" in err.value.details  # the log tail says why
    assert not (sim_home / "dbfail").exists()
    assert cluster_pids(sim_home / "dbfail") == [] and daemons_under(sim_home) == []


def test_rootless_accounting(unprivileged_user):
    """An ordinary user gets MariaDB, slurmdbd and sacct without sudo, all running as them."""
    user = unprivileged_user
    TEST_HOME_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(TEST_HOME_ROOT, 0o1777)
    home = TEST_HOME_ROOT / f"ra-{uuid.uuid4().hex[:6]}"
    env = {"SIMCLUSTER_HOME": str(home), "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    cli = [sys.executable, "-m", "provisioner"]
    try:
        up = _as_user(user, cli + ["up", "--name", "ra", "--nodes", "2", "--accounting"], env)
        assert up.returncode == 0, up.stderr
        # The user's shell as the docs have it: Slurm's commands through `simcluster env` (where
        # the nodes have a network of the cluster's own, only its wrappers reach slurmctld).
        shell = f'eval "$({shlex.join(cli)} env --name ra)" && '
        sub = _as_user(user, ["bash", "-c", shell + "sbatch --parsable -o /dev/null --wrap true"], env)
        assert sub.returncode == 0, sub.stderr
        job_id = sub.stdout.strip()
        deadline, out = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "COMPLETED" not in out:
            out = _as_user(user, ["bash", "-c", shell + f"sacct -n -P -X -j {job_id} --format=State,User,Account"],
                           env).stdout
            time.sleep(0.2)
        assert out.split() == [f"COMPLETED|{user}|simcluster"], out
        # Every process of the cluster, the database and slurmdbd included, runs as the user.
        uid = pwd.getpwnam(user).pw_uid
        pids = cluster_pids(home / "ra")
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids}
        assert {"mariadbd", "slurmdbd", "slurmctld"} <= names, names
        assert all(Path(f"/proc/{p}").stat().st_uid == uid for p in pids)
        down = _as_user(user, cli + ["down", "--name", "ra"], env)
        assert down.returncode == 0, down.stderr
        assert cluster_pids(home / "ra") == [] and not (home / "ra").exists()
    finally:
        # By name: `down --all` would also remove every docker cluster on the machine.
        subprocess.run(cli + ["down", "--name", "ra"], env=dict(os.environ, SIMCLUSTER_HOME=str(home)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


def test_verify_gains_an_accounting_check_when_enabled(make_cluster):
    c = make_cluster("--nodes", "2", "--accounting")
    proc = c.cli(["verify", "--suite", "basic", "--json"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    statuses = {ch["name"]: ch["status"] for ch in json.loads(proc.stdout)["checks"]}
    assert statuses.get("basic.accounting") == "PASS", statuses
