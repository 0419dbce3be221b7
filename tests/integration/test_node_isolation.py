"""Every local virtual node a host (as root): its own network namespace and cgroup tree.

Two nodes listen on one port at once, a node's connections carry its own address, no
daemon listens on the host's own interfaces, a job over --mem ends OUT_OF_MEMORY, a job
cannot open another node's GPU, a step is killed as a whole; `down` and a failed `up`
leave no namespace, device or cgroup behind; stop/start keep the addresses.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from provisioner.providers.local import cgroups, network, network_plan
from tests.conftest import run_cli
from tests.integration.test_local_cluster import wait_job, write_job

pytestmark = pytest.mark.integration

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and cgroups need root")


def _state(c) -> dict:
    return json.loads((c.root / "state.json").read_text())


def _tag(c) -> str:
    return network_plan.tag_of(str(c.root))


def _require_namespaces(c) -> dict:
    data = _state(c)["provider_data"]
    if not data.get("network"):
        pytest.skip(f"this host gives no network namespaces: {data.get('notes', {}).get('network')}")
    return data


@needs_root
def test_nodes_have_their_own_network_and_limits(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2", "--fake-gpus", "2")
    data = _require_namespaces(c)
    net = data["network"]
    st = json.loads(c.cli(["status", "--json"]).stdout)
    assert st["node_network"].startswith("a network namespace each"), st["node_network"]

    # In a job, hostname -i, the interface and the hosts file agree on the node's address.
    out = c.run(["srun", "-N2", "bash", "-c",
                 "echo $SLURMD_NODENAME $(hostname -i) $(ip -4 -o addr show eth0 | awk '{print $4}') "
                 "$(getent hosts $SLURMD_NODENAME | awk '{print $1}')"]).stdout
    for line in out.splitlines():
        node, addr, cidr, resolved = line.split()
        assert addr == net["addrs"][node] == resolved == cidr.split("/")[0], line

    # Two nodes listen on 0.0.0.0:29500 at once (a fixed MASTER_PORT, torch's TCPStore), and
    # a connection from node2 to node1 arrives from node2's own address.
    prog = tmp_path / "ports.py"
    prog.write_text(textwrap.dedent("""
        import os, socket, time
        rank = int(os.environ["SLURM_PROCID"])
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", 29500))
        srv.listen()
        if rank == 0:
            conn, peer = srv.accept()
            print("peer", peer[0], flush=True)
        else:
            for _ in range(100):
                try:
                    socket.create_connection(("node1", 29500), timeout=2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            print("connected", flush=True)
    """))
    out = c.run(["srun", "-N2", "--ntasks-per-node=1", "python3", str(prog)]).stdout.split()
    assert "connected" in out and out[out.index("peer") + 1] == net["addrs"]["node2"], out

    # Nothing of the cluster listens on this host's own addresses: its daemons live in namespaces.
    ss = subprocess.run(["ss", "-Hltnp"], stdout=subprocess.PIPE, text=True).stdout
    ports = {str(p) for p in [_state(c)["controller_port"], *_state(c)["node_ports"].values()]}
    assert not [line for line in ss.splitlines() if line.split()[3].rsplit(":", 1)[-1] in ports], ss

    # An interactive step from this host reaches a node over the cluster's network.
    pty = subprocess.run(["script", "-qc", "srun -N1 -w node2 --pty bash -c 'tty; hostname'", "/dev/null"],
                         env=c.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, timeout=60)
    # `script` shows a NUL that reaches the terminal as "^@" before the output, now and then;
    # srun may say "queued and waiting for resources" while the last job's node is completing.
    lines = pty.stdout.replace("\r", "").replace("^@", "").splitlines()
    words = " ".join(line for line in lines if not line.startswith("srun:")).split()
    assert len(words) == 2 and words[0].startswith("/dev/pts/") and words[1] == "node2", pty.stdout

    if not data.get("cgroups"):
        pytest.skip(f"no cgroups here: {st['node_cgroups']}")
    assert st["node_cgroups"].startswith("enforced"), st["node_cgroups"]
    assert "unlike a production host" not in c.up_output.stdout, c.up_output.stdout

    # Cores are pinned where the node shape is real: a 1-CPU step runs on one CPU.
    if os.cpu_count() and os.cpu_count() >= 2:
        cpus = c.run(["srun", "-N1", "-c1", "grep", "Cpus_allowed_list", "/proc/self/status"]).stdout.split()[-1]
        assert cpus.isdigit(), cpus

    # A job over --mem ends OUT_OF_MEMORY, with Slurm's own message.
    job = write_job(tmp_path / "oom.sh", f"""
        #SBATCH -N1 -w node1 --mem=200M --output={tmp_path}/oom.out
        python3 -c "b = bytearray(600 * 1024 * 1024); print(len(b))"
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    assert wait_job(c, job_id) == "OUT_OF_MEMORY"
    assert "oom-kill event" in (tmp_path / "oom.out").read_text()

    # A job given node1's GPU opens its own device (ENXIO: a fake GPU has no driver) and is
    # refused node2's (EPERM: the devices cgroup), as on separate hosts.
    probe = ("import errno, os, sys\n"
             "for g in (0, 1):\n"
             "    try:\n"
             "        os.close(os.open(f'{sys.argv[1]}/nvidia{g}', os.O_RDWR))\n"
             "        print(g, 'opened')\n"
             "    except OSError as e:\n"
             "        print(g, errno.errorcode[e.errno])\n")
    out = c.run(["srun", "-w", "node1", "--gres=gpu:1", "python3", "-c", probe, str(c.root / "dev")]).stdout
    assert out.split("\n")[:2] == ["0 ENXIO", "1 EPERM"], out
    # Slurm numbers the job's GPUs from 0 (CUDA sees only the allowed device), as in production.
    assert c.run(["srun", "-w", "node2", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES"]).stdout.strip() == "0"

    # A step is killed as a whole: every task still running is reported Killed, none
    # "Exited with exit code 137" (proctrack/cgroup signals the step's cgroup at once).
    script = write_job(tmp_path / "early.sh", """
        [ "$SLURM_PROCID" = 1 ] && exit 0
        sleep 20
    """)
    for _ in range(3):
        res = c.run(["srun", "-n10", "-N1", "-w", "node1", "-O", "-W2", str(script)], check=False)
        assert "tasks 0,2-9: Killed" in res.stderr and "Exited with exit code" not in res.stderr, res.stderr


@needs_root
def test_down_leaves_no_namespace_device_or_cgroup(make_cluster, sim_home):
    c = make_cluster("--nodes", "3")
    _require_namespaces(c)
    tag = _tag(c)
    made = network.leftovers(tag) + cgroups.leftovers(tag)
    assert len([m for m in made if m.startswith("netns")]) == 4, made  # 3 nodes + the controller
    # stop/start keep each node's address (the namespaces outlive the processes).
    before = _state(c)["provider_data"]["network"]
    c.cli(["stop"], check=True)
    assert len(network.leftovers(tag)) == len([m for m in made if not m.startswith("/sys")])
    c.cli(["start"], check=True)
    assert _state(c)["provider_data"]["network"] == before
    assert c.run(["srun", "-N3", "hostname"]).stdout.split()
    c.cli(["down"], check=True)
    assert network.leftovers(tag) == [] and cgroups.leftovers(tag) == []


@needs_root
def test_a_failed_up_leaves_no_namespace_device_or_cgroup(sim_home):
    name = f"f{uuid.uuid4().hex[:5]}"
    # A slurm.conf line slurmctld refuses: the cluster is made, then fails to come up.
    cfg = sim_home / "bad.yaml"
    cfg.write_text(f"name: {name}\nnodes: 2\nslurmConf:\n  - NoSuchSlurmOption=1\n")
    res = run_cli(["up", "--name", name, "-c", str(cfg), "--wait", "10"], sim_home)
    assert res.returncode != 0
    tag = network_plan.tag_of(str(sim_home / name))
    assert network.leftovers(tag) == [] and cgroups.leftovers(tag) == []
    assert not (sim_home / name).exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="the rootless fallback is for ordinary users (test_rootless covers it as root)")
def test_rootless_status_says_what_network_the_nodes_have(make_cluster):
    c = make_cluster("--nodes", "2")
    st = json.loads(c.cli(["status", "--json"]).stdout)
    # A network of the cluster's own in its user namespace (docs/rootless.md), or where user
    # namespaces are refused this host's; no cgroups either way.
    net = _state(c)["provider_data"].get("network")
    if net:
        assert st["node_network"].startswith("a network namespace each") and "user namespace" in st["node_network"]
    else:
        assert st["node_network"].startswith(("rootless", "no namespaces")), st["node_network"]
    assert "not enforced" in st["node_cgroups"]
