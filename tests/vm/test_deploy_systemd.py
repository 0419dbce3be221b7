"""`simcluster deploy` to systemd hosts reached as a sudo user: two bookworm VMs, cgroup v2.

The rig (tests/vm/cluster.py): node1 (controller and compute) and node2 (compute), booted
once for this module from the cached bookworm image, on a network only they share; ssh from
this machine as ``runner`` (passwordless sudo, the image's key; root cannot log in), through
ports forwarded on 127.0.0.1. The inventory says ``ansible_become=true`` and asks for cgroup
limits (``proctrack/cgroup``, ``task/cgroup,task/affinity``).

deploy (munge, slurmctld, slurmd, slurmdbd: Debian's systemd units; MariaDB and slurmrestd: the
roles' units; the project's configs) -> the units run under systemd, slurmd's jobs in its
delegated cgroup v2 subtree, only Slurm's ports open to the network -> a job has its sacct row
-> `status --ssh` is healthy (accounting and REST too) and shows each host's services as
systemd reports them -> `verify --ssh --suite basic,rest` passes, basic.limits included (a job
over its --mem ends OUT_OF_MEMORY) -> [a second deploy changes nothing] -> the faults over
SSH (tests/vm/deploy_faults.py): `fault kill node2` (the unit stays down, Slurm marks the
node DOWN; `fault heal` starts it), `fault kill-controller` and `stop-accounting` healed,
`verify --ssh --suite faults`, `fault reboot node2` (back and idle by itself, no unit
failed), `fault reboot node1`, the controller's host, with a job queued (the job runs after
it, no accounting row lost) -> [`deploy --check` with one more partition shows slurm.conf's
diff and changes nothing -> that spec applied while a job runs: the partition is there, the
job ends COMPLETED]. In brackets: the redeploys, run by `make test-vm-deploy` only. Every
qemu is stopped by the fixture, also on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_cli, wait_for
from tests.vm import deploy_faults
from tests.vm.deploy_faults import GUEST_POLL_S
from tests.vm.cluster import VMCluster
from tests.vm.machine import qemu_missing

pytestmark = [pytest.mark.vm]
# Ansible under TCG costs 3-10 s a task (a deploy 4-7 minutes), so `make test` runs what proves
# the point (a fresh deploy as the sudo user, its units and limits, status, verify, the faults)
# and `make test-vm-deploy` (SIMCLUSTER_VM_DEPLOY=1) runs the deploys after it too: the same
# spec again, `--check` of a changed one, and that one applied while a job runs.
WHOLE_RIG = os.environ.get("SIMCLUSTER_VM_DEPLOY") == "1"
redeploys = pytest.mark.skipif(not WHOLE_RIG, reason="another deploy under TCG takes 3-5 min: make test-vm-deploy "
                                                     "runs the redeploys")

NAMES = ["node1", "node2"]
SPEC = """apiVersion: simcluster/v1
kind: Cluster
name: {name}
fakeGpus: true
nodes:
  - {{name: node1, gpus: [0], cpus: 2, memory: 1G}}
  - {{name: node2, gpus: [1], cpus: 2, memory: 1G}}
partitions:
  - {{name: main, nodes: ALL, default: true}}
accounting: true
rest: true
failureDetection: fast
"""
# The changed spec --check shows and the last test applies: one more partition.
MORE = "  - {name: debug, nodes: [node2]}\n"
# What a production cluster on cgroup v2 hosts runs (docs/deploy.md, Inventory).
CGROUP_VARS = ["slurm_proctrack_type=proctrack/cgroup", "slurm_task_plugin=task/cgroup,task/affinity"]
# verify's per-check limit in the guests: CPU work there is 20-30x slower (tests/vm/conftest.py).
CHECK_TIMEOUT_S = 300
TIMINGS: dict = {}
ACCOUNTED: list = []  # job ids sacct has shown: they must survive the controller's reboot


@pytest.fixture(scope="module")
def rig(vm_machines, tmp_path_factory, vm_timings):
    if qemu_missing():
        pytest.skip(f"cannot run VMs on this host: {qemu_missing()}")
    try:
        import ansible  # noqa: F401
        import ansible_runner  # noqa: F401
    except ImportError:
        pytest.skip("the deploy extra is not installed (make setup-deploy)")
    image = vm_machines.image("bookworm")
    workdir = tmp_path_factory.mktemp("deploy-systemd")
    cluster = VMCluster(image, workdir / "vms", NAMES)
    vm_timings["deploy-systemd"] = TIMINGS
    started = time.monotonic()
    try:
        cluster.start()
        TIMINGS["rig_boot"] = round(time.monotonic() - started, 1)
        yield cluster
    finally:
        cluster.stop()
        assert cluster.running() == [], "qemu of the deploy rig left running"


@pytest.fixture(scope="module")
def setup(rig, tmp_path_factory):
    work = tmp_path_factory.mktemp("deploy-systemd-files")
    name = f"vmsd{uuid.uuid4().hex[:4]}"
    known = rig.known_hosts(work / "known_hosts")
    spec = work / "cluster.yaml"
    spec.write_text(SPEC.format(name=name))
    inventory = rig.inventory(work / "inventory.ini", controller="node1", compute=NAMES, cluster=name,
                              known_hosts=known, group_vars=CGROUP_VARS)
    return {"name": name, "spec": spec, "inventory": inventory, "home": work / "home",
            "target": f"runner@127.0.0.1:{rig.hosts['node1'].port}",
            "ssh": ["--ssh-key", str(rig.key), "--known-hosts", str(known)], "work": work}


def deploy(setup, *extra, timeout=1800):
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(setup["spec"]), *extra], setup["home"],
                   timeout=timeout)
    return proc, round(time.monotonic() - t0, 1)


@pytest.fixture(scope="module")
def deployed(setup):
    proc, seconds = deploy(setup)
    TIMINGS["deploy_first"] = seconds
    print(f"\nfirst deploy: {seconds}s: {proc.stdout.strip()}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-8000:]}"
    return proc


def sinfo(rig, fmt="%N %t") -> str:
    return rig.vm("node1").run(f"sinfo -h -N -o '{fmt}'", user="runner", timeout=60).stdout


def test_hosts_are_systemd_cgroup_v2_and_refuse_root(rig):
    for name, vm in rig.machines.items():
        res = vm.run("ps -p 1 -o comm=; stat -fc %T /sys/fs/cgroup; hostname; sudo -n id -u", user="runner",
                     check=True)
        assert res.stdout.split() == ["systemd", "cgroup2fs", name, "0"], res.stdout
    # No root login, with the very key runner logs in with.
    vm = rig.vm("node1")
    proc = subprocess.run(["ssh", "-i", str(rig.key), "-p", str(vm.port), "-o", "BatchMode=yes",
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "ConnectTimeout=20", "root@127.0.0.1", "true"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stderr
    # The VMs reach each other on their own network, not through this machine's ports.
    assert rig.vm("node2").run(f"ping -c1 -W5 {rig.hosts['node1'].addr}", user="runner").returncode == 0


def test_deploy_as_a_sudo_user_runs_debian_units(deployed, setup, rig):
    assert f"cluster '{setup['name']}' deployed on 2 hosts" in deployed.stdout
    expect = {"node1": ["munge", "slurmctld", "slurmd", "slurmdbd", "simcluster-mariadb", "simcluster-slurmrestd"],
              "node2": ["munge", "slurmd"]}
    for name, units in expect.items():
        vm = rig.vm(name)
        res = vm.run("systemctl is-active " + " ".join(units), check=True)
        assert res.stdout.split() == ["active"] * len(units), (name, res.stdout)
        res = vm.run("systemctl is-enabled " + " ".join(units), check=True)
        assert res.stdout.split() == ["enabled"] * len(units), (name, res.stdout)
        for unit in units:  # the Debian packages' units; the roles' own only where Debian has none fit
            path = vm.run(f"systemctl show -P FragmentPath {unit}", check=True).stdout.strip()
            where = "/etc/systemd/system" if unit.startswith("simcluster-") else "/lib/systemd/system"
            assert path == f"{where}/{unit}.service", (name, unit, path)
        # The project's config, from configs/templates: cgroup limits asked by the inventory.
        conf = vm.run("cat /etc/slurm/slurm.conf", check=True).stdout
        assert f"ClusterName={setup['name']}" in conf and "ProctrackType=proctrack/cgroup" in conf
        assert "TaskPlugin=task/cgroup,task/affinity" in conf
        # slurmd's cgroup v2 subtree is its own (Delegate=yes in Debian's unit).
        assert vm.run("systemctl show -P Delegate slurmd", check=True).stdout.strip() == "yes"
    assert sinfo(rig).split() == ["node1", "idle", "node2", "idle"], sinfo(rig)
    # Debian's slurmrestd.service stays off: the roles' unit listens on the cluster address only.
    debian_rest = rig.vm("node1").run("systemctl is-enabled slurmrestd; systemctl is-active slurmrestd").stdout.split()
    assert "enabled" not in debian_rest and "active" not in debian_rest, debian_rest


def listening(vm) -> set:
    """{(address, port)} of the guest's listening TCP sockets."""
    out = vm.run("ss -H -ltn", check=True).stdout
    return {(a.rsplit(":", 1)[0].strip("[]"), int(a.rsplit(":", 1)[1])) for a in (ln.split()[3] for ln in out.splitlines())}


def test_accounting_and_rest_listen_only_where_slurm_needs(deployed, rig):
    # Firewall-neutral: nothing new on every interface but Slurm's own ports; MariaDB on
    # loopback, slurmrestd on the cluster address only.
    ctl = listening(rig.vm("node1"))
    addr = rig.hosts["node1"].addr
    assert ("127.0.0.1", 3306) in ctl and not {a for a, p in ctl if p == 3306} - {"127.0.0.1"}, ctl
    assert {a for a, p in ctl if p == 6820} == {addr}, ctl
    wide = {p for a, p in ctl if a in ("0.0.0.0", "*", "::")}
    assert wide <= {22, 6817, 6818, 6819}, f"listening on every interface: {sorted(wide)}"
    user = rig.vm("node1").run("ps -o user= -p $(systemctl show -P MainPID simcluster-slurmrestd)", check=True)
    assert user.stdout.strip() == "slurmrestd", user.stdout


def test_a_job_has_its_accounting_row(deployed, rig):
    ctl = rig.vm("node1")
    job = ctl.run("sbatch --parsable -N1 -o /dev/null --wrap 'true'", user="runner", check=True).stdout.strip()
    ACCOUNTED.append(job)
    wait_for(f"job {job} in sacct as COMPLETED",
             lambda: ctl.run(f"sacct -n -X -P -j {job} -o State,ExitCode", user="runner").stdout.split()
             == ["COMPLETED|0:0"], timeout=240, poll=GUEST_POLL_S)


def test_status_over_ssh_as_the_sudo_user(deployed, setup):
    proc = run_cli(["status", "--ssh", setup["target"], *setup["ssh"]], setup["home"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"cluster {setup['name']} (ssh, Slurm 22.05." in proc.stdout and "): healthy" in proc.stdout, proc.stdout
    st = json.loads(run_cli(["status", "--ssh", setup["target"], *setup["ssh"], "--json"], setup["home"],
                            check=True, timeout=300).stdout)
    assert st["healthy"] and st["controller"]["responding"] and st["munged"]["alive"]
    assert [(n["name"], n["state"], n["gpus"]) for n in st["nodes"]] == [("node1", "idle", [0]), ("node2", "idle", [1])]
    # Each host's services as systemd reports them: the controller over SSH, the nodes through srun.
    assert st["services"] == {"node1": {"munge": "active", "slurmctld": "active", "simcluster-mariadb": "active",
                                        "slurmdbd": "active", "simcluster-slurmrestd": "active", "slurmd": "active"},
                              "node2": {"munge": "active", "slurmd": "active"}}, st["services"]
    assert st["accounting"]["healthy"] and st["accounting"]["registered"], st["accounting"]
    assert st["rest"]["healthy"] and st["rest"]["versions"], st["rest"]
    assert "services on node2 (systemd): munge active, slurmd active" in proc.stdout, proc.stdout


def test_verify_basic_and_rest_over_ssh_with_cgroup_limits(deployed, setup):
    t0 = time.monotonic()
    proc = run_cli(["verify", "--ssh", setup["target"], *setup["ssh"], "--suite", "basic,rest", "--json",
                    "--timeout", str(CHECK_TIMEOUT_S)], setup["home"], timeout=3000)
    TIMINGS["verify_basic"] = round(time.monotonic() - t0, 1)
    assert proc.stdout.strip(), f"no report (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    report = json.loads(proc.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    lines = "\n".join(f"{c['name']}: {c['status']} {c['message']}" for c in report["checks"])
    print(f"\nverify --ssh --suite basic,rest ({TIMINGS['verify_basic']}s):\n{lines}")
    failed = [n for n, c in checks.items() if c["status"] == "FAIL"]
    assert proc.returncode == 0 and report["passed"] and not failed, f"failed: {failed}\n{lines}"
    # cgroup v2 enforces --mem on these hosts: the check runs and passes, it does not SKIP.
    assert checks["basic.limits"]["status"] == "PASS" and "OUT_OF_MEMORY" in checks["basic.limits"]["message"], lines
    # Accounting and the REST API on the systemd hosts: a job sacct reports, a job over REST.
    assert checks["basic.accounting"]["status"] == "PASS", lines
    assert checks["rest.api"]["status"] == "PASS", lines


@redeploys
def test_second_deploy_changes_nothing(deployed, setup):
    proc, seconds = deploy(setup)
    TIMINGS["deploy_second"] = seconds
    print(f"\nsecond deploy: {seconds}s: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert proc.stdout.strip().endswith("nothing changed"), proc.stdout
    assert "changed:" not in proc.stderr, proc.stderr


def test_fault_errors_over_ssh_are_one_line(deployed, setup, rig):
    deploy_faults.check_fault_errors(setup, rig)


def test_fault_kill_of_a_compute_host_then_heal(deployed, setup, rig):
    # Debian's slurmd.service has no Restart=: the unit stays down, Slurm marks the node DOWN
    # (failureDetection: fast), and `fault heal` starts it.
    TIMINGS.update(deploy_faults.check_fault_kill(setup, rig))


def test_fault_kill_controller_and_stop_accounting_then_heal(deployed, setup, rig):
    TIMINGS.update(deploy_faults.check_fault_controller_and_accounting(setup, rig))


def test_verify_faults_suite_over_ssh(deployed, setup, rig):
    TIMINGS.update(deploy_faults.check_verify_faults_suite(setup, rig))


def test_fault_reboot_of_a_compute_host(deployed, setup, rig):
    TIMINGS.update(deploy_faults.check_fault_reboot_compute(setup, rig))
    # What the host runs came back with it, and nothing else: Debian's slurmctld, slurmdbd and
    # slurmrestd units, which the image's packages enabled, were turned off by the deploy.
    failed = rig.vm("node2").run("systemctl --failed --no-legend --plain", check=True).stdout.strip()
    assert failed == "", f"units failed on node2 after its reboot:\n{failed}"
    assert rig.vm("node2").run("systemctl is-enabled slurmctld slurmdbd slurmrestd").stdout.split() == \
        ["disabled"] * 3


def test_fault_reboot_of_the_controllers_host_loses_no_job(deployed, rig, setup):
    TIMINGS.update(deploy_faults.check_fault_reboot_controller_keeps_jobs(setup, rig))
    ctl = rig.vm("node1")
    # Every job sacct showed before the reboots still has its row.
    for done in ACCOUNTED:
        assert ctl.run(f"sacct -n -X -P -j {done} -o State", user="runner").stdout.split() == ["COMPLETED"], done


def changed_spec(setup) -> Path:
    path = setup["work"] / "cluster-more.yaml"
    text = setup["spec"].read_text()
    path.write_text(text.replace("default: true}\n", "default: true}\n" + MORE, 1))
    assert path.read_text() != text
    return path


def host_state(rig) -> dict:
    """What a deploy that changes nothing leaves alone: the configs' checksums, the daemons' start times."""
    out = {}
    for name in NAMES:
        vm = rig.vm(name)
        out[name] = (vm.run("md5sum /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf", check=True).stdout,
                     vm.run("systemctl show -P ActiveEnterTimestamp munge slurmd"
                            + (" slurmctld slurmdbd simcluster-slurmrestd" if name == "node1" else ""),
                            check=True).stdout)
    return out


@redeploys
def test_check_shows_a_changed_spec_and_changes_nothing(deployed, setup, rig):
    before = host_state(rig)
    spec = changed_spec(setup)
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(spec), "--check"], setup["home"], timeout=1800)
    TIMINGS["deploy_check"] = round(time.monotonic() - t0, 1)
    print(f"\ndeploy --check ({TIMINGS['deploy_check']}s):\n{proc.stdout}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    # The diff first: slurm.conf's new partition line, the same on both hosts; then what would change.
    assert "--- /etc/slurm/slurm.conf on node1, node2\n" in proc.stdout, proc.stdout
    assert any(line.startswith("+PartitionName=debug ") and "Nodes=node2" in line
               for line in proc.stdout.splitlines()), proc.stdout
    assert f"cluster '{setup['name']}' checked on 2 hosts" in proc.stdout and "would change" in proc.stdout
    # ... and nothing changed: the same files, no daemon restarted, no new partition.
    assert host_state(rig) == before
    assert "debug" not in sinfo(rig, "%P")


@redeploys
def test_changed_spec_applied_while_a_job_runs(deployed, setup, rig):
    ctl = rig.vm("node1")
    # A job on node2 (whose slurmd the deploy restarts) that runs until this test lets it end.
    job = ctl.run("sbatch --parsable -w node2 -o /home/runner/kept-%j.out "
                  "--wrap 'while [ ! -e /home/runner/release-kept ]; do sleep 2; done; echo survived'",
                  user="runner", check=True).stdout.strip()
    wait_for(f"job {job} running", lambda: ctl.run(f"squeue -h -j {job} -o %T", user="runner").stdout.strip()
             == "RUNNING", timeout=240, poll=GUEST_POLL_S)
    t0 = time.monotonic()
    proc = run_cli(["deploy", "-i", str(setup["inventory"]), "-c", str(changed_spec(setup))], setup["home"],
                   timeout=1800)
    TIMINGS["deploy_changed_spec"] = round(time.monotonic() - t0, 1)
    print(f"\ndeploy of the changed spec ({TIMINGS['deploy_changed_spec']}s): {proc.stdout.strip()}")
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    assert "changed" in proc.stdout and "nothing changed" not in proc.stdout, proc.stdout
    # The new partition is there, and the job still runs where it ran.
    parts = ctl.run("sinfo -h -o '%P %N'", user="runner", check=True).stdout.split()
    assert "debug" in parts and parts[parts.index("debug") + 1] == "node2", parts
    state = ctl.run(f"squeue -h -j {job} -o '%T %N'", user="runner", check=True).stdout.split()
    assert state == ["RUNNING", "node2"], f"job {job} after the changed spec was applied: {state}"
    rig.vm("node2").run("touch /home/runner/release-kept", check=True)
    wait_for(f"job {job} COMPLETED in sacct",
             lambda: ctl.run(f"sacct -n -X -P -j {job} -o State,ExitCode", user="runner").stdout.split()
             == ["COMPLETED|0:0"], timeout=240, poll=GUEST_POLL_S)
    assert rig.vm("node2").run(f"cat /home/runner/kept-{job}.out", check=True).stdout.strip() == "survived"
