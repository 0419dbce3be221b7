"""Names and addresses in jobs behave as on separate hosts (local backend, real daemons).

Each virtual node has an address of its own (as root on its own network, else a loopback
address); in a job a node name and a numeric
address each resolve to one address (servers that bind every getaddrinfo result, as
tornado does, then start), IPv6 lookups with AI_V4MAPPED answer at once (torch asks those
first), and a server a job starts on one node is reachable from another node by name and
from the submit host at the node's address.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import textwrap

import pytest

from provisioner.providers.local.processes import pid_namespace
from tests.conftest import wait_for
from tests.integration.test_local_cluster import wait_job, write_job

pytestmark = pytest.mark.integration

LOOKUPS = textwrap.dedent("""
    import json, os, socket, sys
    me = os.environ["SLURMD_NODENAME"]
    def gai(host, family=socket.AF_UNSPEC, flags=0):
        try:
            return [r[4][0] for r in socket.getaddrinfo(host, 80, family, socket.SOCK_STREAM, 0, flags)]
        except socket.gaierror as exc:
            return str(exc)
    own = gai(me)[0]
    out = {"node": me, "own": own}
    out["hostname"] = socket.gethostname()
    for host in ("node1", "node2", own, "127.0.0.1", "localhost", sys.argv[2]):
        out[host] = {"any": gai(host), "v6mapped": gai(host, socket.AF_INET6, socket.AI_V4MAPPED | socket.AI_ALL)}
    # Bind every result for the node's name on one port, as tornado's bind_sockets does.
    port = int(sys.argv[1])
    bound = []
    for fam, kind, proto, _, addr in socket.getaddrinfo(me, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                                                         socket.AI_PASSIVE):
        s = socket.socket(fam, kind, proto)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind(addr)
        s.listen()
        bound.append(addr[0])
    out["bound"] = bound
    print(json.dumps(out), flush=True)
""")

SERVER = textwrap.dedent("""
    import os, socket, sys
    port, ready, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    srv = socket.create_server((os.environ["SLURMD_NODENAME"], port))
    open(ready, "w").write(srv.getsockname()[0])
    for _ in range(clients):
        conn, peer = srv.accept()
        who = conn.recv(64).decode()
        conn.sendall(f"hello {who} from {os.environ['SLURMD_NODENAME']}".encode())
        print("served", who, flush=True)
        conn.close()
""")


def _port() -> int:
    return 21000 + os.getpid() % 4000


def test_lookups_in_jobs_give_one_address_each_and_nodes_bind_the_same_port(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2")
    script = tmp_path / "lookups.py"
    script.write_text(LOOKUPS)
    # Both nodes bind the same port at once, each on its own address.
    out = c.run(["srun", "-N2", "--ntasks-per-node=1", os.sys.executable, str(script), str(_port()),
                 socket.gethostname()]).stdout
    results = {r["node"]: r for r in map(json.loads, out.splitlines())}
    assert sorted(results) == ["node1", "node2"], out
    addr1, addr2 = results["node1"]["own"], results["node2"]["own"]
    net = json.loads((c.root / "state.json").read_text())["provider_data"].get("network")
    if net:  # a network namespace each (root): the cluster's own subnet
        assert addr1 == net["addrs"]["node1"] and addr2 == net["addrs"]["node2"], (addr1, addr2)
    else:  # sharing the host's network: a loopback address each, never 127.0.x.x
        assert addr1.startswith("127.") and not addr1.startswith("127.0.")
    assert addr1 != addr2
    for node, r in results.items():
        assert r["node1"]["any"] == [addr1] and r["node2"]["any"] == [addr2], r
        assert r[r["own"]]["any"] == [r["own"]], r  # a numeric address: itself, once
        assert r["127.0.0.1"]["any"] == ["127.0.0.1"] and r["localhost"]["any"] == ["127.0.0.1"], r
        assert len(r[socket.gethostname()]["any"]) == 1, r  # the host's own name still resolves
        assert r["hostname"] == node, r  # each node has its own host name, as a host of its own
        assert r["node2"]["v6mapped"] == [f"::ffff:{addr2}"], r  # torch's first lookup answers
        assert r["bound"] == [r["own"]], r
    # slurmctld has each node at its own address (the conf may give both on one line).
    for node, addr in (("node1", addr1), ("node2", addr2)):
        assert f"NodeAddr={addr} " in c.run(["scontrol", "show", "node", node]).stdout


def test_server_in_a_job_is_reached_from_another_node_and_from_the_submit_host(make_cluster, tmp_path):
    c = make_cluster("--nodes", "2")
    (tmp_path / "server.py").write_text(SERVER)
    ready, port = tmp_path / "ready", _port() + 1
    client = (f"import socket; s = socket.create_connection(('node1', {port}), timeout=30); "
              "s.sendall(b'node2'); print(s.recv(64).decode())")
    job = write_job(tmp_path / "serve.sh", f"""
        #SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/serve.out --time=2
        srun -N1 -n1 -w node1 {os.sys.executable} {tmp_path}/server.py {port} {ready} 2 &
        while [ ! -s {ready} ]; do sleep 0.1; done
        srun -N1 -n1 -w node2 {os.sys.executable} -c "{client}"
        wait
    """)
    job_id = c.run(["sbatch", "--parsable", str(job)]).stdout.strip()
    wait_for("the job's server to listen", lambda: ready.exists() and ready.read_text(), timeout=60)
    node_addr = re.search(r"NodeAddr=(\S+)", c.run(["scontrol", "show", "node", "node1"]).stdout).group(1)
    assert ready.read_text() == node_addr  # it listens on node1's own address
    with socket.create_connection((node_addr, port), timeout=30) as s:
        s.sendall(b"submit-host")
        assert s.recv(64).decode() == "hello submit-host from node1"
    state = wait_job(c, job_id)
    out = (tmp_path / "serve.out").read_text()
    assert state == "COMPLETED", out
    assert "hello node2 from node1" in out and "served node2" in out and "served submit-host" in out, out


def _status(pid: int) -> dict:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return {}


def test_each_node_has_a_process_table_and_spool_of_its_own(make_cluster, tmp_path):
    """With tini at hand each slurmd runs in a PID namespace of its own (names.py): a job
    sees its node's processes only, under tini as pid 1 (simcluster-node-start itself where
    it is built: its --init does tini's work); the stepds slurmd leaves behind are
    reaped (no zombies pile up after many jobs); the spool directory is the node's tmpfs;
    and when the node's slurmd dies, its jobs die with it, as on a node that goes down."""
    from provisioner.providers.local import names
    if not names.pid_init():
        pytest.skip("tini is not installed (apt install tini): nodes share the host's process table")
    c = make_cluster("--nodes", "2")
    state = json.loads((c.root / "state.json").read_text())
    assert state["provider_data"]["pid_namespace"] is True, state["provider_data"]
    slurmd = {n: state["pids"][f"slurmd:{n}"] for n in ("node1", "node2")}
    assert all(_status(p).get("Name", "").strip() == "slurmd" for p in slurmd.values()), slurmd
    assert pid_namespace(slurmd["node1"]) != pid_namespace(slurmd["node2"]) != pid_namespace(os.getpid())

    probe = ("echo pid1=$(cat /proc/1/comm); echo procs=$(ps -e -o comm= | sort | tr '\\n' ,); "
             "echo spool=$(awk '$1 == \"simcluster-spool\" {print $2}' /proc/mounts)")
    out = c.run(["srun", "-N2", "--ntasks-per-node=1", "-l", "sh", "-c", probe]).stdout
    for rank, node in (("0", "node1"), ("1", "node2")):
        lines = dict(line.split(": ", 1)[1].split("=", 1) for line in out.splitlines() if line.startswith(rank + ": "))
        # /proc/1/comm: the program's name cut to 15 characters.
        assert lines["pid1"] == ("simcluster-node" if names.node_starter() else "tini"), out
        procs = lines["procs"].split(",")
        assert procs.count("slurmd") == 1 and "slurmctld" not in procs and "munged" not in procs, out
        assert lines["spool"] == str(c.root / "spool" / node), out

    # No TaskProlog where nothing needs one (no GPUs here or in the spec, Debian's Open MPI or
    # none): Open MPI in jobs still gets the nodes' TCP settings, from the node's parameter file.
    if not glob.glob("/dev/nvidia[0-9]*") and not names.foreign_openmpi():
        assert "TaskProlog=" not in c.slurm_conf.read_text()
    if shutil.which("ompi_info") and names.openmpi_params():
        info = c.run(["srun", "-N1", "-w", "node2", "ompi_info", "--parsable", "--param", "btl", "tcp",
                      "--level", "9"]).stdout
        net = state["provider_data"].get("network")
        want = net["subnet"] if net else "lo"  # TCP over the nodes' own network, or loopback
        assert f"mca:btl:tcp:param:btl_tcp_if_include:value:{want}" in info.splitlines(), info

    # 20 jobs on node1: each leaves a slurmstepd that slurmd double-forked; pid 1 reaps them.
    c.run(["sbatch", "--wait", "-w", "node1", "--array=0-19", "-o", "/dev/null", "--wrap", "true"], timeout=120)
    ns = pid_namespace(slurmd["node1"])
    in_node = [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if pid_namespace(p) == ns]
    zombies = [p for p in in_node if _status(p).get("State", "").strip().startswith("Z")]
    assert in_node and not zombies, (in_node, zombies)

    # A job on node2 ends when node2's slurmd is killed: its processes leave with the namespace.
    job = c.run(["sbatch", "--parsable", "-w", "node2", "-o", "/dev/null", "--wrap", "exec sleep 300"]).stdout.strip()
    ns2 = pid_namespace(slurmd["node2"])

    def sleepers():
        return [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
                if pid_namespace(p) == ns2 and _status(p).get("Name", "").strip() == "sleep"]
    wait_for(f"job {job}'s sleep to start on node2", sleepers, timeout=60, poll=0.1)
    os.kill(slurmd["node2"], 9)
    wait_for("the node's processes to end with its slurmd", lambda: not sleepers(), timeout=30, poll=0.1)
