"""Case a of the VM matrix: a stock Debian 12 (bookworm) host with systemd and cgroup v2, as
root. From a copy of the checkout, the way the README has a user do it: `make setup`, then
`simcluster test --nodes 2 --fake-gpus 2 --suite basic`, which passes with no SKIP caused by
the host, its limit checks run and passing through Slurm's cgroup/v2 plugin per virtual
node. Then the limits a production node has, one by one, on a cluster that stays up
(`status` says they are enforced), two clusters with a node1 each side by side, and an
ordinary user's cluster, whose nodes' cgroups live in the subtree the user's systemd
delegates to them.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from tests.vm.conftest import CHECKOUT, guest_platform, verify_report, vm_make_setup, vm_test_basic

pytestmark = [pytest.mark.vm]

SIMCLUSTER = f"{CHECKOUT}/.venv/bin/simcluster"


def test_bookworm_host_is_what_case_a_needs(bookworm_vm):
    """The guest is the platform case a claims: Debian 12, systemd as PID 1, cgroup v2 only,
    Debian's Slurm 22.05."""
    version, init, cgroupfs, slurm = platform = guest_platform(bookworm_vm)
    assert version.startswith("12"), platform
    assert init == "systemd", platform
    assert cgroupfs == "cgroup2fs", platform
    assert re.match(r"slurm(-wlm)? 22\.05\.", slurm), platform


def test_bookworm_make_setup_then_test_basic(bookworm_vm, vm_timings):
    """`make setup`, then the README's CI command: every check passes, none is SKIP for a
    reason of the host, and the limit checks (basic.limits: OUT_OF_MEMORY; basic.isolation:
    another node's GPU refused) ran and passed. Nothing of the cluster is left after it."""
    res, checks, lines = vm_test_basic(bookworm_vm, "vma", vm_timings.setdefault("bookworm", {}))
    assert checks["basic.limits"]["status"] == "PASS" and "OUT_OF_MEMORY" in checks["basic.limits"]["message"], lines
    isolation = checks["basic.isolation"]
    assert isolation["status"] == "PASS" and "EPERM" in isolation["message"], lines
    up = re.search(r"is up \(local\).* in ([0-9.]+)s", res.stderr)
    if up:
        vm_timings["bookworm"]["up"] = float(up.group(1))
    left = bookworm_vm.run("pgrep -a slurmd; pgrep -a slurmctld; ls /sys/fs/cgroup/simcluster "
                           "/run/simcluster/cgroupns 2>/dev/null")
    assert left.stdout.strip() == "", f"simcluster test left this behind in the guest:\n{left.stdout}"


LIMITS_SCRIPT = r"""
set -e
cd /tmp
export PATH={checkout}/.venv/bin:$PATH
simcluster up --name vml --nodes 2 --fake-gpus 2 >/dev/null 2>&1
simcluster up --name vml2 --nodes 1 >/dev/null 2>&1
simcluster status --name vml --json > /tmp/vml-status.json
eval "$(simcluster env --name vml)"
echo "CPUS $(srun -w node1 -n1 -c1 grep Cpus_allowed_list /proc/self/status | cut -f2)"
echo "MEMMAX $(srun -w node2 -n1 --mem=100M sh -c 'cat /sys/fs/cgroup$(sed -n "s/^0:://p" /proc/self/cgroup)/../memory.max')"
printf '#!/bin/sh\n[ "$SLURM_PROCID" = 0 ] && exit 3\nexec sleep 60\n' > /tmp/early.sh
chmod +x /tmp/early.sh
srun -w node1 -N1 -n10 -O -W2 /tmp/early.sh > /tmp/kill.out 2>&1 || true
sed 's/^/KILL /' /tmp/kill.out
eval "$(simcluster env --name vml2)"
srun -n1 true
echo "SCOPES $(ls -d /sys/fs/cgroup/simcluster/*/node1/system.slice/node1_slurmstepd.scope | wc -l)"
echo "UNITS $(systemctl list-units --all --no-legend '*slurmstepd*' | wc -l)"
simcluster down --name vml2 >/dev/null
simcluster down --name vml >/dev/null
echo "LEFT $(ls /sys/fs/cgroup/simcluster /run/simcluster/cgroupns 2>/dev/null | wc -l)"
"""


def test_bookworm_limits_per_node_through_cgroup_v2(bookworm_vm):
    """On a cluster that stays up: status says the limits are enforced; `srun -c1` runs on
    one CPU; --mem is the step's memory.max; a step whose first task exits is killed as a
    whole (every other task Killed); two clusters' node1 each have their own slurmstepd
    scope, and no systemd unit is made for them; `down` leaves no cgroup nor namespace."""
    vm_make_setup(bookworm_vm)
    res = bookworm_vm.run(LIMITS_SCRIPT.format(checkout=CHECKOUT), timeout=900)
    out = res.stdout
    assert res.returncode == 0, f"exit {res.returncode}\n{out}\n{res.stderr[-3000:]}"
    status = json.loads(bookworm_vm.run("cat /tmp/vml-status.json", check=True).stdout)
    assert status["node_cgroups"].startswith("enforced") and "cgroup v2" in status["node_cgroups"], status
    values = dict(line.split(" ", 1) for line in out.splitlines() if line.split(" ", 1)[0] in
                  ("CPUS", "MEMMAX", "SCOPES", "UNITS", "LEFT"))
    assert re.fullmatch(r"\d+", values.get("CPUS", "")), out  # one CPU, not a list or a range
    assert values.get("MEMMAX") == str(100 * 1024 * 1024), out
    kill = "\n".join(line[5:] for line in out.splitlines() if line.startswith("KILL "))
    assert "task 0: Exited with exit code 3" in kill and re.search(r"tasks 1-9: Killed", kill), kill
    assert "exit code 137" not in kill, kill
    assert values.get("SCOPES") == "2", out
    assert values.get("UNITS") == "0", out
    assert values.get("LEFT") == "0", out


ROOTLESS_USER = "simrootless"
# As the ordinary user, in a login shell (su -: pam_systemd gives it XDG_RUNTIME_DIR): the
# cluster, the user's Slurm commands through `simcluster env`'s wrappers, status from that
# same shell, the limits one by one, verify's basic suite, then down. ([s]lurmd: the pattern
# does not match this script's own command line.)
ROOTLESS_SCRIPT = r"""
set -e
cd /tmp
S={simcluster}
$S up --name vmr --nodes 2 --fake-gpus 2 > /tmp/vmr-up.txt 2>&1 || {{ cat /tmp/vmr-up.txt >&2; exit 1; }}
eval "$($S env --name vmr)"
echo "HOSTS $(srun -N2 -n2 hostname | sort | tr '\n' ' ')"
rc=0; $S status --name vmr --json > /tmp/vmr-status.json || rc=$?; echo "STATUS $rc"
grep -E '^(CgroupPlugin|ConstrainDevices|ConstrainRAMSpace)=' $HOME/.local/state/simcluster/vmr/etc/cgroup.conf | sed 's/^/CONF /'
echo "MEMMAX $(srun -w node2 -n1 --mem=100M sh -c 'cat /sys/fs/cgroup$(sed -n "s/^0:://p" /proc/self/cgroup)/../memory.max')"
printf '#!/bin/sh\n[ "$SLURM_PROCID" = 0 ] && exit 3\nexec sleep 60\n' > /tmp/vmr-early.sh
chmod +x /tmp/vmr-early.sh
srun -w node1 -N1 -n4 -O -W2 /tmp/vmr-early.sh > /tmp/vmr-kill.out 2>&1 || true
sed 's/^/KILL /' /tmp/vmr-kill.out
apps=/sys/fs/cgroup/user.slice/user-$(id -u).slice/user@$(id -u).service/app.slice
echo "SCOPES $(ls -d $apps/simcluster-*.scope 2>/dev/null | wc -l)"
$S verify --name vmr --suite basic --json --timeout {timeout} > /tmp/vmr-verify.json || true
$S down --name vmr > /dev/null
for i in $(seq 10); do [ -z "$(ls -d $apps/simcluster-*.scope 2>/dev/null)" ] && break; sleep 1; done  # systemd's own pace
echo "LEFT $(ls -d $apps/simcluster-*.scope 2>/dev/null | wc -l) $(pgrep -c -u "$(id -u)" -f '[s]lurmd|[s]lurmctld|[m]unged|[s]leep infinity' || true)"
"""


def test_bookworm_rootless_comes_up(bookworm_vm):
    """An ordinary user on the same host, whose systemd user manager runs without a login
    (`loginctl enable-linger`): each node start gets a scope of the user's delegated subtree,
    and Slurm's cgroup/v2 plugin enforces there what it does for root's nodes: --mem is the
    step's memory.max and a job over it ends OUT_OF_MEMORY (verify's basic.limits), a step
    whose first task exits is killed as a whole. GPU devices stay unconfined (eBPF needs
    CAP_BPF), and status and basic.isolation say so. From the user's shell, Slurm commands
    reach the nodes (own host names) through `simcluster env`'s wrappers, and status run
    there answers; `down` leaves no scope and no process of the user's."""
    from tests.vm.conftest import CHECK_TIMEOUT_S
    vm_make_setup(bookworm_vm)
    user = ROOTLESS_USER
    script = ROOTLESS_SCRIPT.format(simcluster=SIMCLUSTER, timeout=CHECK_TIMEOUT_S)
    res = bookworm_vm.run(
        f"id {user} >/dev/null 2>&1 || useradd -m {user}; loginctl enable-linger {user}; "
        f"for i in $(seq 120); do systemctl is-active -q user@$(id -u {user}).service && break; sleep 1; done; "
        f"chmod o+x /root; su - {user} -c {shlex.quote(script)}; rc=$?; chmod o-x /root; exit $rc", timeout=1500)
    out = res.stdout
    assert res.returncode == 0, f"exit {res.returncode}\n{out}\n{res.stderr[-3000:]}"
    values = dict(line.split(" ", 1) for line in out.splitlines() if line.split(" ", 1)[0] in
                  ("HOSTS", "STATUS", "MEMMAX", "SCOPES", "LEFT"))
    assert values.get("HOSTS", "").split() == ["node1", "node2"], out
    assert values.get("STATUS") == "0", out  # status from the shell with the wrappers on PATH
    conf = [line[5:] for line in out.splitlines() if line.startswith("CONF ")]
    assert conf == ["CgroupPlugin=autodetect", "ConstrainDevices=no", "ConstrainRAMSpace=yes"], out
    status = json.loads(bookworm_vm.run("cat /tmp/vmr-status.json", check=True).stdout)
    limits = status["node_cgroups"]
    assert limits.startswith("enforced") and "delegated to this user" in limits and "CAP_BPF" in limits, status
    assert values.get("MEMMAX") == str(100 * 1024 * 1024), out
    kill = "\n".join(line[5:] for line in out.splitlines() if line.startswith("KILL "))
    assert "task 0: Exited with exit code 3" in kill and re.search(r"tasks 1-3: Killed", kill), kill
    assert values.get("SCOPES") == "2", out  # one delegated scope per node
    _, checks, lines = verify_report(bookworm_vm.run("cat /tmp/vmr-verify.json", check=True).stdout)
    assert not [c for c in checks.values() if c["status"] == "FAIL"], lines
    assert checks["basic.limits"]["status"] == "PASS" and "OUT_OF_MEMORY" in checks["basic.limits"]["message"], lines
    # basic.isolation: its GPU part skips (not confined rootless: said, not hidden), so the
    # check does; every other part ran and passed.
    isolation = checks["basic.isolation"]
    assert isolation["status"] == "SKIP" and "GPU devices SKIP: GPU devices not confined" in isolation["message"], lines
    for part in ("same port on 2 nodes", "peer address", "/etc/slurm"):
        assert f"{part}:" in isolation["message"] and f"{part} SKIP" not in isolation["message"], (part, lines)
    assert values.get("LEFT") == "0 0", out
