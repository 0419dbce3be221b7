"""`simcluster fault ... --ssh` and `verify --ssh --suite faults` on the systemd VMs a deploy made.

Assertions for tests/vm/test_deploy_systemd.py, called with its module fixtures: ``setup``
(a dict: "target" runner@127.0.0.1:PORT of node1, the controller; "ssh" the --ssh-key and
--known-hosts arguments; "home"; "spec" the deployed cluster.yaml) and ``rig`` (the
VMCluster: ``rig.vm(name).run(...)``, ``rig.hosts[name].addr``). They need the rig's
known_hosts to have each guest's key under its cluster address too (VMCluster.known_hosts
writes both): `fault --ssh` reaches node2 by SSH jumped through node1 to 10.77.0.12:22.

Each function starts from a healthy cluster (both nodes idle, every unit active) and leaves
it so; each returns its measured seconds ({name: seconds}) for the module's TIMINGS. The
reboots run the guests' real `systemctl reboot`: under TCG one takes 60-90 s.
"""

from __future__ import annotations

import re
import time
from typing import Dict, List

from tests.conftest import run_cli, wait_for

CONTROLLER, COMPUTE = "node1", "node2"
# Each poll is a command over SSH in a TCG guest: every few seconds, not every 0.3 s.
GUEST_POLL_S = 3.0


def fault(setup, *args, timeout: float = 900):
    """`simcluster fault ARGS --ssh <node1>`: the CompletedProcess."""
    return run_cli(["fault", *args, "--ssh", setup["target"], *setup["ssh"]], setup["home"], timeout=timeout)


def _sinfo(rig) -> Dict[str, str]:
    out = rig.vm(CONTROLLER).run("sinfo -h -N -o '%N %t'", user="runner", timeout=60).stdout
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)


def _units(rig, name: str, units: List[str]) -> List[str]:
    return rig.vm(name).run("systemctl is-active " + " ".join(units), timeout=60).stdout.split()


def _boot_id(rig, name: str) -> str:
    return rig.vm(name).run("cat /proc/sys/kernel/random/boot_id", check=True, timeout=60).stdout.strip()


def _after_reboot(rig, name: str) -> None:
    """The test's ssh master connection to ``name`` died with its host: open a new one."""
    rig.vm(name)._close_masters()


def _healthy(rig) -> None:
    wait_for("both nodes idle", lambda: _sinfo(rig) == {CONTROLLER: "idle", COMPUTE: "idle"}, timeout=240, poll=GUEST_POLL_S)


def check_fault_kill(setup, rig) -> Dict[str, float]:
    """`fault kill node2`: slurmd and a running job's processes die (systemctl kill), the unit
    stays down, Slurm marks node2 DOWN; `fault heal` starts slurmd, node2 is idle again."""
    _healthy(rig)
    ctl = rig.vm(CONTROLLER)
    job = ctl.run(f"sbatch --parsable --no-requeue -w {COMPUTE} -o /dev/null --wrap 'sleep 600'", user="runner",
                  check=True).stdout.strip()
    wait_for(f"job {job} running", lambda: ctl.run(f"squeue -h -j {job} -o %T", user="runner").stdout.strip()
          == "RUNNING", timeout=240, poll=GUEST_POLL_S)
    wait_for(f"job {job}'s sleep on {COMPUTE}", lambda: rig.vm(COMPUTE).run("pgrep -x sleep").returncode == 0,
          timeout=120, poll=GUEST_POLL_S)
    t0 = time.monotonic()
    proc = fault(setup, "kill", COMPUTE)
    assert proc.returncode == 0, proc.stderr
    addr = rig.hosts[COMPUTE].addr
    assert proc.stdout.startswith(f"killed node {COMPUTE} on {addr}: slurmd and "), proc.stdout
    assert "(SIGKILL, systemctl kill)" in proc.stdout, proc.stdout
    # A crashed host's Slurm: no slurmd, no slurmstepd, no job task; the unit stays down.
    assert rig.vm(COMPUTE).run("systemctl is-active slurmd").stdout.strip() in ("failed", "inactive")
    assert rig.vm(COMPUTE).run("pgrep -x slurmd; pgrep -x slurmstepd; pgrep -x sleep").stdout.strip() == ""
    wait_for(f"{COMPUTE} DOWN", lambda: _sinfo(rig).get(COMPUTE, "").startswith("down"), timeout=240, poll=2)
    down_s = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    healed = fault(setup, "heal")
    heal_s = round(time.monotonic() - t0, 1)
    assert healed.returncode == 0, healed.stderr
    assert healed.stdout.startswith("cluster '") and f"started slurmd on {COMPUTE}" in healed.stdout, healed.stdout
    assert _units(rig, COMPUTE, ["munge", "slurmd"]) == ["active", "active"]
    assert _sinfo(rig)[COMPUTE] == "idle", _sinfo(rig)
    ctl.run(f"scancel {job}", user="runner")
    # Nothing left to heal: it says so and succeeds.
    again = fault(setup, "heal")
    assert again.returncode == 0 and "nothing to heal" in again.stdout, (again.stdout, again.stderr)
    print(f"\nfault kill {COMPUTE}: DOWN after {down_s}s; fault heal {heal_s}s: {healed.stdout.strip()}")
    return {"fault_kill_to_down": down_s, "fault_heal_after_kill": heal_s}


REBOOTED = re.compile(r"rebooted (\S+)'s host: ssh back after ([\d.]+)s, (\S+) (idle|mixed|allocated) "
                      r"([\d.]+)s later")


def check_fault_reboot_compute(setup, rig) -> Dict[str, float]:
    """`fault reboot node2`: the host reboots (a new boot id), and the command returns once
    SSH answers and node2 is idle again; its units came back with the host."""
    _healthy(rig)
    before = _boot_id(rig, COMPUTE)
    proc = fault(setup, "reboot", COMPUTE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    m = REBOOTED.fullmatch(proc.stdout.strip())
    assert m and m.group(1) == m.group(3) == COMPUTE, proc.stdout
    assert "waiting for SSH with a new boot id" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    _after_reboot(rig, COMPUTE)
    assert _boot_id(rig, COMPUTE) != before
    assert _units(rig, COMPUTE, ["munge", "slurmd"]) == ["active", "active"]
    assert _sinfo(rig)[COMPUTE] in ("idle", "mix", "alloc"), _sinfo(rig)
    print(f"\nfault reboot {COMPUTE}: {proc.stdout.strip()}")
    return {"fault_reboot_compute_ssh": float(m.group(2)), "fault_reboot_compute_node": float(m.group(5))}


def check_fault_reboot_controller_keeps_jobs(setup, rig) -> Dict[str, float]:
    """`fault reboot node1` (the controller's host, a compute node too) with a job held in
    the queue and one finished: the command reconnects, waits for slurmctld and node1; the
    held job is still PENDING under its id and runs once released; both have their sacct rows."""
    _healthy(rig)
    ctl = rig.vm(CONTROLLER)
    done = ctl.run("sbatch --parsable -N1 -o /dev/null --wrap true", user="runner", check=True).stdout.strip()
    wait_for(f"job {done} COMPLETED in sacct", lambda: ctl.run(f"sacct -n -X -P -j {done} -o State",
                                                            user="runner").stdout.split() == ["COMPLETED"], 240,
             GUEST_POLL_S)
    held = ctl.run("sbatch --parsable --hold -N1 -o /dev/null --wrap hostname", user="runner",
                   check=True).stdout.strip()
    # slurmctld saves its job state at most every 5 s (docs/faults.md): the held job is in it.
    time.sleep(6)
    before = _boot_id(rig, CONTROLLER)
    proc = fault(setup, "reboot", CONTROLLER)
    assert proc.returncode == 0, proc.stderr[-4000:]
    m = REBOOTED.fullmatch(proc.stdout.strip())
    assert m and m.group(1) == m.group(3) == CONTROLLER, proc.stdout
    assert "slurmctld answers" in proc.stderr, proc.stderr
    _after_reboot(rig, CONTROLLER)
    assert _boot_id(rig, CONTROLLER) != before
    assert _units(rig, CONTROLLER, ["munge", "slurmctld", "slurmd", "simcluster-mariadb", "slurmdbd",
                                    "simcluster-slurmrestd"]) == ["active"] * 6
    assert ctl.run(f"squeue -h -j {held} -o %T", user="runner", check=True).stdout.strip() == "PENDING"
    ctl.run(f"scontrol release {held}", user="runner", check=True)
    for job in (done, held):
        wait_for(f"job {job} COMPLETED in sacct after the controller's reboot",
              lambda: ctl.run(f"sacct -n -X -P -j {job} -o State", user="runner").stdout.split() == ["COMPLETED"],
              timeout=240, poll=GUEST_POLL_S)
    print(f"\nfault reboot {CONTROLLER}: {proc.stdout.strip()}")
    return {"fault_reboot_controller_ssh": float(m.group(2)), "fault_reboot_controller_node": float(m.group(5))}


def check_fault_controller_and_accounting(setup, rig) -> Dict[str, float]:
    """`fault kill-controller` and `fault stop-accounting` SIGKILL the units; `fault heal`
    starts them again (and says which)."""
    _healthy(rig)
    times = {}
    for verb, unit in (("kill-controller", "slurmctld"), ("stop-accounting", "slurmdbd")):
        proc = fault(setup, verb)
        assert proc.returncode == 0 and "(SIGKILL, systemctl kill)" in proc.stdout, (proc.stdout, proc.stderr)
        assert _units(rig, CONTROLLER, [unit])[0] in ("failed", "inactive")
        t0 = time.monotonic()
        healed = fault(setup, "heal")
        times[f"fault_heal_after_{verb}"] = round(time.monotonic() - t0, 1)
        assert healed.returncode == 0 and f"started {unit} on" in healed.stdout, (healed.stdout, healed.stderr)
        assert _units(rig, CONTROLLER, [unit]) == ["active"]
    return times


def check_fault_errors(setup, rig) -> None:
    """Bad input over --ssh: one line, exit 2, nothing changed."""
    proc = fault(setup, "pause", COMPUTE)
    assert proc.returncode == 2 and "fault pause is not available on a deployed cluster (--ssh)" in proc.stderr
    proc = fault(setup, "kill", "node9")
    assert proc.returncode == 2 and "unknown node 'node9'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _units(rig, COMPUTE, ["slurmd"]) == ["active"]


def check_verify_faults_suite(setup, rig) -> Dict[str, float]:
    """`verify --ssh --suite faults`: controller-restart and accounting-outage PASS where the
    spec has failureDetection: fast (else SKIP "needs up --fast-failure ..."); requeue-resume
    SKIPs without torch on the hosts."""
    import json
    _healthy(rig)
    t0 = time.monotonic()
    proc = run_cli(["verify", "--ssh", setup["target"], *setup["ssh"], "--suite", "faults", "--json",
                    "--timeout", "300"], setup["home"], timeout=3000)
    seconds = round(time.monotonic() - t0, 1)
    assert proc.stdout.strip(), f"no report (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    lines = "\n".join(f"{n}: {c['status']} {c['message']}" for n, c in checks.items())
    print(f"\nverify --ssh --suite faults ({seconds}s):\n{lines}")
    fast = "failureDetection: fast" in setup["spec"].read_text()
    for name in ("faults.controller-restart", "faults.accounting-outage"):
        if fast:
            assert checks[name]["status"] == "PASS", lines
        else:
            assert checks[name]["status"] == "SKIP" and "failureDetection: fast" in checks[name]["message"], lines
    assert proc.returncode == 0, lines
    _healthy(rig)
    return {"verify_faults": seconds}
