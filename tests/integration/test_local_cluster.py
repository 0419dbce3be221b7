"""The local backend with real munged/slurmctld/slurmd: clusters come up, run jobs, go away.

What every backend must do the same (status keys, export-logs, idempotent up, delete on
failure, verify basic) is in tests/contract; here: what is particular to the local backend.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import Cluster, daemons_under, run_cli

pytestmark = pytest.mark.integration


def write_job(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def wait_job(cluster, job_id: str, timeout: float = 60) -> str:
    """Poll until the job leaves the queue; return its last state as scontrol saw it."""
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        out = cluster.run(["scontrol", "show", "job", job_id, "-o"], check=False).stdout
        for field in out.split():
            if field.startswith("JobState="):
                state = field.split("=", 1)[1]
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {state} after {timeout}s")


def test_two_node_cluster_runs_srun_and_sbatch(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    assert "2 nodes idle" in c.up_output.stdout

    out = c.run(["srun", "-N2", "--label", "bash", "-c", "echo $SLURMD_NODENAME"]).stdout
    assert sorted(line.split(": ")[1] for line in out.split("\n") if line) == ["node1", "node2"]

    job = write_job(tmp_path / "job.sh", f"""
        #SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/out-%j.txt
        srun bash -c 'echo task=$SLURM_PROCID node=$SLURMD_NODENAME'
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    assert wait_job(c, job_id) == "COMPLETED"
    lines = sorted((tmp_path / f"out-{job_id}.txt").read_text().split())
    assert lines == ["node=node1", "node=node2", "task=0", "task=1"]

    status = json.loads(run_cli(["status", "--name", c.name, "--json"], c.home, check=True).stdout)
    assert status["healthy"] is True
    assert [n["name"] for n in status["nodes"]] == ["node1", "node2"]
    assert [n["gpus"] for n in status["nodes"]] == [[0], [1]]
    assert all(n["slurmd_alive"] and n["state"] == "idle" for n in status["nodes"])

    # list, env, exec, export-logs, idempotent up and a failed up: tests/contract (every backend).
    env_out = run_cli(["env", "--name", c.name], c.home, check=True).stdout
    assert f"export SLURM_CONF={c.slurm_conf}" in env_out  # local: the host's Slurm commands, no wrappers


def _etc_slurm_snapshot(top: Path = Path("/etc/slurm")) -> list:
    """Every entry under the host's /etc/slurm: path, mode, owner, mtime, content hash."""
    if not top.exists():
        return []
    found = []
    for path in sorted([top, *top.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        found.append((str(path), st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, digest))
    return found


def _host_mounts_at(target: str) -> list:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if line.split()[4] == target]


def test_each_node_finds_the_clusters_config_at_etc_slurm_and_the_hosts_is_untouched(sim_home, tmp_path):
    """Slurm's commands in a job find the cluster's slurm.conf without SLURM_CONF, as on a
    production node; the host's own /etc/slurm is never written to or mounted over."""
    before = _etc_slurm_snapshot()
    name = f"t{uuid.uuid4().hex[:6]}"
    up = run_cli(["up", "--name", name, "--nodes", "2"], sim_home, check=True)
    try:
        status = json.loads(run_cli(["status", "--name", name, "--json"], sim_home, check=True).stdout)
        if not status["node_etc_slurm"].startswith("the cluster's config"):
            # No namespaces (libnss_wrapper) or no /etc/slurm here: status says so.
            assert "SLURM_CONF" in status["node_etc_slurm"], status["node_etc_slurm"]
            pytest.skip(f"nodes cannot get /etc/slurm here: {status['node_etc_slurm']}")
        assert _host_mounts_at("/etc/slurm") == []  # the mounts are the nodes' own
        c = Cluster(sim_home, name, up)
        job = write_job(tmp_path / "noconf.sh", f"""
            #SBATCH --nodes=1 -w node2 --output={tmp_path}/noconf-%j.txt
            env -u SLURM_CONF srun -n1 hostname | sed 's/^/srun on /'
            env -u SLURM_CONF scontrol show config | grep ClusterName
            env -u SLURM_CONF sinfo -h -o 'sinfo: %N'
        """)
        job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
        assert wait_job(c, job_id) == "COMPLETED"
        text = (tmp_path / f"noconf-{job_id}.txt").read_text()
        assert "srun on node2" in text, text
        assert re.search(rf"^ClusterName\s*=\s*{name}$", text, re.M), text
        assert "sinfo: node[1-2]" in text, text
    finally:
        run_cli(["down", "--name", name], sim_home, check=True)
    assert _etc_slurm_snapshot() == before
    assert _host_mounts_at("/etc/slurm") == []


def test_each_job_sees_its_nodes_physical_gpu_ids(make_cluster, tmp_path):
    """Pitfall 1: Slurm alone gives index 0 on every node; without device cgroups jobs must
    see 6 and 7. With them (root) each node can open only its own GPU, and a job sees it
    as 0, as Slurm numbers it on a production host."""
    c = make_cluster("--nodes", "2", "--gpus", "6,7", "--fake-gpus")
    g1, g2 = ("0", "0") if c.gpus_constrained else ("6", "7")
    out = c.run(["srun", "-N2", "--gres=gpu:1", "bash", "-c",
                 "echo $SLURMD_NODENAME=$CUDA_VISIBLE_DEVICES"]).stdout.split()
    assert sorted(out) == [f"node1={g1}", f"node2={g2}"]

    # The batch step sees it too, and a step without a GPU sees none.
    job = write_job(tmp_path / "gpu.sh", f"""
        #SBATCH --nodes=1 --nodelist=node2 --gres=gpu:1 --output={tmp_path}/gpu.out
        echo batch=$CUDA_VISIBLE_DEVICES
        srun bash -c 'echo step=$CUDA_VISIBLE_DEVICES'
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    assert wait_job(c, job_id) == "COMPLETED"
    assert (tmp_path / "gpu.out").read_text().split() == [f"batch={g2}", f"step={g2}"]
    no_gpu = c.run(["srun", "-N1", "-w", "node1", "bash", "-c", "echo \"[$CUDA_VISIBLE_DEVICES]\""]).stdout
    assert no_gpu.strip() == "[]"


def test_two_gpus_per_node_are_split_between_jobs(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--gpus", "0-3", "--fake-gpus")
    both = c.run(["srun", "-N1", "-w", "node2", "--gres=gpu:2", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES"])
    assert both.stdout.strip() == ("0,1" if c.gpus_constrained else "2,3")
    # Two concurrent one-GPU jobs on node2 get different physical GPUs (the TaskProlog's
    # ids; with device cgroups Slurm's node-local index of the GPU each job was given).
    show = "$SLURM_JOB_GPUS" if c.gpus_constrained else "$CUDA_VISIBLE_DEVICES"  # the batch step's
    ids = []
    for i in range(2):
        job = write_job(tmp_path / f"g{i}.sh", f"""
            #SBATCH -N1 -w node2 --gres=gpu:1 --mem=1 --output={tmp_path}/g{i}.out
            echo {show}; sleep 2
        """)
        ids.append(c.run(["sbatch", "--parsable", str(job)]).stdout.strip())
    for job_id in ids:
        assert wait_job(c, job_id) == "COMPLETED"
    seen = sorted((tmp_path / f"g{i}.out").read_text().strip() for i in range(2))
    assert seen == (["0", "1"] if c.gpus_constrained else ["2", "3"])


def test_master_addr_from_nodelist_resolves_and_accepts_connections(make_cluster, tmp_path):
    """Pitfall 2: MASTER_ADDR=$(scontrol show hostnames ... | head -n1) must be reachable."""
    c = make_cluster("--nodes", "2")
    rendezvous = tmp_path / "rdzv.py"
    rendezvous.write_text(textwrap.dedent("""
        import os, socket, sys, time
        addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["SLURM_PROCID"])
        if rank == 0:
            srv = socket.create_server((addr, port))
            conn, _ = srv.accept()
            print("rank0 got", conn.recv(64).decode(), "on", addr, flush=True)
        else:
            for _ in range(200):
                try:
                    s = socket.create_connection((addr, port), timeout=2); break
                except OSError:
                    time.sleep(0.05)
            s.sendall(f"hello-from-{os.environ['SLURMD_NODENAME']}".encode())
            print("rank1 connected to", addr, socket.gethostbyname(addr), flush=True)
    """))
    port = 29500 + os.getpid() % 1000
    job = write_job(tmp_path / "rdzv.sh", f"""
        #SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/rdzv.out --time=2
        export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
        export MASTER_PORT={port}
        echo master=$MASTER_ADDR
        getent hosts "$MASTER_ADDR"
        srun --kill-on-bad-exit=1 {os.sys.executable} {rendezvous}
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    state = wait_job(c, job_id)
    out = (tmp_path / "rdzv.out").read_text()
    assert state == "COMPLETED", out
    assert "master=node1" in out
    assert "rank0 got hello-from-node2 on node1" in out


def test_production_shape_requests_are_accepted(make_cluster, tmp_path):
    """Pitfall 3: --cpus-per-task=28 --mem=200G on a 2-core host."""
    c = make_cluster("--nodes", "2", "--cpus", "112", "--memory", "240000", "--gpus", "6,7", "--fake-gpus")
    job = write_job(tmp_path / "big.sh", f"""
        #SBATCH --nodes=2 --gres=gpu:1 --ntasks-per-node=1 --cpus-per-task=28 --mem=200G
        #SBATCH --output={tmp_path}/big.out
        srun bash -c 'echo $SLURMD_NODENAME cpus=$SLURM_CPUS_PER_TASK gpu=$CUDA_VISIBLE_DEVICES'
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    assert wait_job(c, job_id) == "COMPLETED"
    g1, g2 = ("0", "0") if c.gpus_constrained else ("6", "7")
    assert sorted((tmp_path / "big.out").read_text().strip().splitlines()) == [
        f"node1 cpus=28 gpu={g1}", f"node2 cpus=28 gpu={g2}"]
    node = c.run(["scontrol", "show", "node", "node1", "-o"]).stdout
    assert "CPUTot=112" in node and "RealMemory=240000" in node


def test_eight_nodes_all_reached_by_srun(make_cluster):
    c = make_cluster("--nodes", "8", "--fake-gpus", "8")
    out = c.run(["srun", "-N8", "--gres=gpu:1", "bash", "-c", "echo $SLURMD_NODENAME:$CUDA_VISIBLE_DEVICES"]).stdout
    assert sorted(out.split()) == sorted(f"node{i + 1}:{0 if c.gpus_constrained else i}" for i in range(8))


def test_two_clusters_side_by_side(make_cluster):
    a = make_cluster("--nodes", "2")
    b = make_cluster("--nodes", "3")
    assert a.run(["sinfo", "-h", "-o", "%D"]).stdout.strip() == "2"
    assert b.run(["sinfo", "-h", "-o", "%D"]).stdout.strip() == "3"
    sa = json.loads(run_cli(["status", "--name", a.name, "--json"], a.home).stdout)
    sb = json.loads(run_cli(["status", "--name", b.name, "--json"], b.home).stdout)
    ports_a = {sa["controller"]["port"], *(n["port"] for n in sa["nodes"])}
    ports_b = {sb["controller"]["port"], *(n["port"] for n in sb["nodes"])}
    assert not ports_a & ports_b
    run_cli(["down", "--name", a.name], a.home, check=True)
    assert b.run(["srun", "-N3", "hostname"]).stdout.count("\n") == 3
    assert run_cli(["status", "--name", b.name], b.home).returncode == 0


def test_down_stops_daemons_and_running_jobs(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2")
    job = write_job(tmp_path / "long.sh", """
        #SBATCH --nodes=2 --output=/dev/null
        srun sleep 600
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    deadline = time.monotonic() + 30
    while "RUNNING" not in c.run(["scontrol", "show", "job", job_id]).stdout:
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.1)
    root = c.root
    assert daemons_under(root), "expected the cluster's daemons to be running"
    down = run_cli(["down", "--name", c.name], c.home, check=True)
    assert "removed" in down.stdout
    assert not root.exists()
    assert daemons_under(root) == []
    # Job tasks carry the cluster marker (set by the TaskProlog, where there is one) and the
    # cluster's SLURM_CONF (from the submitting environment): none may survive.
    markers = (f"SIMCLUSTER_STATE_DIR={root}\0".encode(), f"SLURM_CONF={root}/etc/slurm.conf\0".encode())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        alive = stat.rsplit(")", 1)[1].split()[0] not in "ZX"
        assert not (any(m in env for m in markers) and alive), f"pid {pid} survived down"


def test_down_leaves_alone_a_process_that_only_reads_the_clusters_files(make_cluster, tmp_path):
    """Another user reading the cluster's slurm.conf (`less /var/lib/simcluster/X/etc/...`) is
    not part of the cluster: `down` stops the cluster's processes, never a bystander's."""
    import subprocess
    c = make_cluster("--nodes", "1")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMCLUSTER", "SLURM"))}
    reader = subprocess.Popen(["tail", "-f", str(c.root / "etc" / "slurm.conf")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_cli(["down", "--name", c.name], c.home, check=True)
        assert reader.poll() is None, f"down killed a bystander reading the cluster's files (rc {reader.returncode})"
    finally:
        reader.kill()
        reader.wait()


def test_readiness_timeout_names_the_stuck_node(sim_home):
    spec = sim_home / "drained.yaml"
    spec.write_text("apiVersion: simcluster/v1\nkind: Cluster\nname: stuck\nnodes: 2\n"
                    "slurmConf: ['DownNodes=node2 State=DRAIN Reason=maintenance-test']\n")
    proc = run_cli(["up", "--config", str(spec), "--wait", "3"], sim_home)
    assert proc.returncode == 1, proc.stderr
    assert "1 of 2 nodes are not idle" in proc.stderr
    assert "node2" in proc.stderr and "maintenance-test" in proc.stderr
    assert "tail of" in proc.stderr and "slurmctld.log" in proc.stderr
    assert not (sim_home / "stuck").exists()
    assert daemons_under(sim_home) == []


def test_render_writes_configs_without_starting_anything(sim_home, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    proc = run_cli(["render", "--config", str(repo / "configs/examples/node6-node7-one-gpu-each.yaml"),
                    "--out", str(tmp_path / "r")], sim_home, check=True)
    assert "slurm.conf" in proc.stdout
    conf = (tmp_path / "r" / "slurm.conf").read_text()
    assert "NodeName=node[6-7]" in conf and "Port=[17016-17017]" in conf and "CPUs=112" in conf
    assert "File=/dev/nvidia7" in (tmp_path / "r" / "gres.conf").read_text()
    assert daemons_under(sim_home) == [] and not (sim_home / "node6-node7").exists()


def test_up_whose_reader_went_away_still_makes_the_whole_cluster(sim_home):
    """`simcluster up 2>&1 | head -1`: the progress lines after the first meet a closed pipe.
    A failed write used to abort up half-way (network namespaces made, nothing started, no
    state saved to remove them by); now the cluster comes up and down removes all of it."""
    import subprocess

    from tests.conftest import SIMCLUSTER
    env = dict(os.environ, SIMCLUSTER_HOME=str(sim_home))
    env.pop("SLURM_CONF", None)
    cmd = " ".join(SIMCLUSTER) + " up --name piped --nodes 2 2>&1 | head -1"
    first = subprocess.run(["bash", "-c", cmd], env=env, stdout=subprocess.PIPE, text=True, timeout=120).stdout
    assert first.strip(), "up printed nothing"
    status = run_cli(["status", "--name", "piped", "--json"], sim_home, check=True)
    nodes = json.loads(status.stdout)["nodes"]
    assert sorted(n["name"] for n in nodes) == ["node1", "node2"], status.stdout
    assert json.loads(status.stdout)["healthy"], status.stdout
    run_cli(["down", "--name", "piped"], sim_home, check=True)
    assert daemons_under(sim_home / "piped") == []
